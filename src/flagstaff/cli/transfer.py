"""`flagstaff flags import` and `flags export` on the command line: the ``--group-type``
option, the progress bar and the report's lines. The import and export themselves are
:mod:`flagstaff.application.flag_transfer`."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from flagstaff.application.flag_transfer import ACTIONS, ImportReport, TransferError
from flagstaff.ingest.groups import MAX_GROUP_TYPES

_PAST = {"create": "created", "update": "updated"}


def report_lines(report: ImportReport, dry_run: bool, every_flag: bool) -> list[str]:
    """The plan (dry run) or the summary, one line per group type and changed flag."""
    out: list[str] = []
    for g in report.group_types:
        verb = g.action if dry_run else _PAST.get(g.action, g.action)
        detail = f": {g.detail}" if g.detail else ""
        out.append(f"group type {g.index}={g.name}: {verb}{detail}")
    for f in report.flags:
        if every_flag or f.action in ("rejected", "skipped"):
            verb = f.action if dry_run else _PAST.get(f.action, f.action)
            out.append(f"{verb} {f.label}{': ' + f.detail if f.detail else ''}")
    counts: dict[str, int] = {a: sum(f.action == a for f in report.flags) for a in ACTIONS}
    if dry_run:
        summary = ", ".join(f"{counts[a]} to {a}" for a in ("create", "update"))
        summary += f", {counts['unchanged']} unchanged, {counts['skipped']} skipped"
        summary = f"dry run, nothing written: {summary}, {counts['rejected']} rejected"
    else:
        summary = (
            f"{counts['create']} created, {counts['update']} updated, "
            f"{counts['unchanged']} unchanged, {counts['skipped']} skipped, "
            f"{counts['rejected']} rejected"
        )
    out.append(summary)
    return out


def parse_group_type_option(values: Iterable[str]) -> dict[int, str]:
    """``--group-type 0=company`` values as {index: name}."""
    out: dict[int, str] = {}
    for raw in values:
        index_text, sep, name = raw.partition("=")
        try:
            index = int(index_text)
        except ValueError:
            index = -1
        if not sep or not name or not 0 <= index < MAX_GROUP_TYPES:
            raise TransferError(f"--group-type must be INDEX=NAME with INDEX 0-4, got {raw!r}")
        if out.get(index, name) != name:
            raise TransferError(f"--group-type gives index {index} two names")
        out[index] = name
    return out


# progress -----------------------------------------------------------------------------------


class Progress:
    """A bar on stderr (or any stream), drawn only when enabled; redrawn per percent."""

    def __init__(self, label: str, total: int, enabled: bool, stream: TextIO | None = None):
        self.label = label
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._shown = -1

    def update(self, done: int) -> None:
        if not self.enabled or self.total <= 0:
            return
        percent = 100 * done // self.total
        if percent == self._shown and done != self.total:
            return
        self._shown = percent
        width = 30
        filled = width * done // self.total
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total}"
        )
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()
