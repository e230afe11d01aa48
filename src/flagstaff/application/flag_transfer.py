"""Flags import and export: a PostHog flags export in, the same shape out (what
``flagstaff flags import`` and ``flags export`` run).

An import is planned flag by flag against what the store holds (create, update, unchanged,
skipped, rejected), so rerunning it on an unchanged file changes nothing. Each flag goes
through :func:`~flagstaff.application.flags.flag_from_input`, the API's own check. Group
types come first: from the file's ``group_type_mapping`` and from the options given; a group
flag whose index has no type is rejected rather than imported to evaluate as
``no_group_type``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource, Trigger
from flagstaff.application.errors import ApiError
from flagstaff.application.flags import FlagWrites, flag_from_input
from flagstaff.common.clock import parse_iso, utc_iso
from flagstaff.flags.records import FeatureFlag, FlagDefinition
from flagstaff.ingest.groups import MAX_GROUP_TYPES
from flagstaff.store.base import Conflict
from flagstaff.store.records import Page
from flagstaff.store.rows import group_type_change

Action = Literal["create", "update", "unchanged", "skipped", "rejected"]
ACTIONS: tuple[Action, ...] = ("create", "update", "unchanged", "skipped", "rejected")
IMPORT_SOURCE = ChangeSource(trigger=Trigger(job_type="flags_import", job_id="cli"))
"""Imported flags are logged as the system's changes, triggered by the import."""


class TransferError(ValueError):
    """The file or a command-line value cannot be imported at all."""


@dataclass
class ImportFile:
    flags: list[Any]
    group_types: dict[int, str]


@dataclass
class PlannedFlag:
    label: str
    action: Action
    detail: str = ""
    flag: FlagDefinition | None = None
    flag_id: int | None = None
    version: int | None = None
    """The version of the stored flag an update replaces."""
    created_at: str | None = None
    """A created flag's ``created_at``, kept from the export when readable."""


@dataclass
class PlannedGroupType:
    index: int
    name: str
    action: Literal["create", "unchanged", "rejected"]
    detail: str = ""


@dataclass
class ImportReport:
    group_types: list[PlannedGroupType] = field(default_factory=list)
    flags: list[PlannedFlag] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return any(f.action == "rejected" for f in self.flags) or any(
            g.action == "rejected" for g in self.group_types
        )


class ProgressSink(Protocol):
    """Where a long import or export reports how far it is (the CLI draws a bar)."""

    total: int

    def update(self, done: int) -> None: ...


class TransferStore(FlagWrites, Protocol):
    """What an import reads and writes: group types, and flags by key."""

    async def list_group_types(self, project_id: int) -> dict[int, str]: ...

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool: ...

    async def get_flag_by_key(self, project_id: int, key: str) -> FeatureFlag | None: ...

    async def list_flags(self, project_id: int, limit: int, offset: int) -> Page: ...


# reading ----------------------------------------------------------------------------------


def _mapping_from(raw: Any) -> dict[int, str]:
    """A ``group_type_mapping``: {"0": "company"} or [{"group_type_index": 0, ...}, ...]."""
    pairs: list[tuple[Any, Any]] = []
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = [
            (r.get("group_type_index"), r.get("group_type")) for r in raw if isinstance(r, dict)
        ]
    else:
        raise TransferError("group_type_mapping must be an object or a list")
    out: dict[int, str] = {}
    for index, name in pairs:
        try:
            i = int(index)
        except (TypeError, ValueError):
            i = -1
        if not 0 <= i < MAX_GROUP_TYPES or not isinstance(name, str) or not name:
            raise TransferError(f"group_type_mapping has an invalid entry {index!r}: {name!r}")
        out[i] = name
    return out


def load_import_file(raw: bytes, source: str) -> ImportFile:
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise TransferError(f"{source} is not valid JSON: {exc}") from None
    if isinstance(data, list):
        return ImportFile(data, {})
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        mapping = data.get("group_type_mapping")
        return ImportFile(data["results"], _mapping_from(mapping) if mapping else {})
    raise TransferError(f"{source} must hold a list of flags or {{'results': [...]}}")


def merge_group_types(from_file: dict[int, str], from_options: dict[int, str]) -> dict[int, str]:
    for index, name in from_options.items():
        if from_file.get(index, name) != name:
            raise TransferError(
                f"--group-type {index}={name} contradicts the file's {index}={from_file[index]}"
            )
    return {**from_file, **from_options}


# planning (pure) ----------------------------------------------------------------------------


def _created_at(value: Any) -> str | None:
    """An exported ``created_at`` in the store's form (UTC, ``Z``), or None if unreadable."""
    if not isinstance(value, str):
        return None
    parsed = parse_iso(value)
    return None if parsed is None else utc_iso(parsed)


def group_indexes(filters: dict[str, Any]) -> set[int]:
    """Group type indexes a flag's ``filters`` aggregate by (the flag's, and any condition's
    own)."""
    found = [filters.get("aggregation_group_type_index")]
    groups = filters.get("groups")
    if isinstance(groups, list):
        found += [g.get("aggregation_group_type_index") for g in groups if isinstance(g, dict)]
    return {i for i in found if isinstance(i, int) and not isinstance(i, bool)}


def plan_flag(
    item: Any, position: int, current: FeatureFlag | None, group_types: dict[int, str]
) -> PlannedFlag:
    """What importing one exported flag does, given the stored flag with its key (or None)."""
    key = item.get("key") if isinstance(item, dict) else None
    label = key if isinstance(key, str) and key else f"#{position}"
    if isinstance(item, dict) and item.get("deleted"):
        return PlannedFlag(label, "skipped", "deleted in the export")
    try:
        flag = flag_from_input(item, current)
    except ApiError as exc:
        return PlannedFlag(label, "rejected", exc.detail)
    missing = sorted(group_indexes(flag.filters) - set(group_types))
    if missing:
        return PlannedFlag(
            label,
            "rejected",
            f"group type index {missing[0]} is unknown: add group_type_mapping to the file "
            f"or pass --group-type {missing[0]}=NAME",
        )
    if current is None:
        created = _created_at(item.get("created_at"))
        return PlannedFlag(label, "create", flag=flag, created_at=created)
    same = all(getattr(flag, f) == getattr(current, f) for f in flag.__struct_fields__)
    if same:
        return PlannedFlag(label, "unchanged", flag_id=current.id)
    return PlannedFlag(label, "update", flag=flag, flag_id=current.id, version=current.version)


# running against a store ----------------------------------------------------------------------


async def run_import(
    store: TransferStore,
    project_id: int,
    source: ImportFile,
    group_types: dict[int, str],
    *,
    dry_run: bool,
    progress: ProgressSink,
) -> ImportReport:
    report = ImportReport()
    known = dict(await store.list_group_types(project_id))
    for index, name in sorted(group_types.items()):
        try:
            new = group_type_change(known, index, name)
        except Conflict as exc:
            report.group_types.append(PlannedGroupType(index, name, "rejected", exc.message))
            continue
        if new and not dry_run:
            try:
                new = await store.create_group_type(project_id, index, name)
            except Conflict as exc:
                report.group_types.append(PlannedGroupType(index, name, "rejected", exc.message))
                continue
        known[index] = name
        report.group_types.append(PlannedGroupType(index, name, "create" if new else "unchanged"))

    seen: set[str] = set()
    for position, item in enumerate(source.flags, 1):
        key = item.get("key") if isinstance(item, dict) else None
        if isinstance(key, str) and key in seen and not item.get("deleted"):
            planned = PlannedFlag(key, "rejected", "the file holds this key twice")
        else:
            current = await store.get_flag_by_key(project_id, key) if isinstance(key, str) else None
            planned = plan_flag(item, position, current, known)
            if isinstance(key, str) and planned.action != "skipped":
                seen.add(key)
        if not dry_run and planned.flag is not None:
            try:
                if planned.action == "create":
                    await store.create_flag(
                        project_id, planned.flag, IMPORT_SOURCE, planned.created_at
                    )
                elif planned.flag_id is not None:
                    await store.update_flag(
                        project_id, planned.flag_id, planned.flag, planned.version, IMPORT_SOURCE
                    )
            except Conflict as exc:
                planned = PlannedFlag(planned.label, "rejected", exc.message)
        report.flags.append(planned)
        progress.update(position)
    return report


class FlagExport(msgspec.Struct, frozen=True):
    """What ``flags export`` writes: PostHog's list of flags (what ``flags import`` and
    PostHog's own import read), with the group types the flags may refer to."""

    count: int
    results: list[FeatureFlag]
    group_type_mapping: dict[str, str]


async def run_export(store: TransferStore, project_id: int, progress: ProgressSink) -> FlagExport:
    """Every live flag, oldest first, with the group types they may refer to."""
    flags: list[FeatureFlag] = []
    page_size = 500
    while True:
        page = await store.list_flags(project_id, page_size, len(flags))
        flags.extend(page.results)
        progress.total = page.count
        progress.update(min(len(flags), page.count))
        if not page.results or len(flags) >= page.count:
            break
    types = await store.list_group_types(project_id)
    mapping = {str(i): name for i, name in sorted(types.items())}
    return FlagExport(len(flags), sorted(flags, key=lambda f: f.id), mapping)
