"""The ``flagstaff`` command: serve, consume (the event stream), migrate, project
create/list/update, key create, flags import/export/explain, events export, backup and restore."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from flagstaff import __version__
from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.application import accounts, flag_usage
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.common.clock import iso_to_ms
from flagstaff.ops import logs
from flagstaff.server.bootstrap import bootstrap
from flagstaff.server.config import Settings, secure_data_dir
from flagstaff.server.services import make_store, sqlite_path
from flagstaff.store.base import Store
from flagstaff.store.changes import ChangeCounter
from flagstaff.store.retention import retention_problem

T = TypeVar("T")
_UNSET: Any = object()


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        workers=getattr(args, "workers", None),
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        database_url=getattr(args, "database_url", None),
        log_level=getattr(args, "log_level", None),
        access_log=True if getattr(args, "access_log", False) else None,
        stream_url=getattr(args, "stream_url", None),
    )


def _with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``fn`` on an open store, then bump the data dir's change counter so a server on
    the same data dir serves what the command wrote from its next request on. Every command
    bumps: a needless bump costs each worker one version read."""

    async def run() -> T:
        store = make_store(settings)
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()
            if settings.data_dir.is_dir():
                counter = ChangeCounter(settings.data_dir)
                counter.bump()
                counter.close()

    return asyncio.run(run())


async def _project_id(store: Store, wanted: int | None) -> int:
    projects = await accounts.all_projects(store)
    if wanted is not None:
        if not any(p.id == wanted for p in projects):
            raise SystemExit(f"flagstaff: no project with id {wanted}")
        return wanted
    if not projects:
        raise SystemExit("flagstaff: there is no project yet: run 'flagstaff project create NAME'")
    if len(projects) > 1:
        raise SystemExit("flagstaff: several projects exist: choose one with --project ID")
    return projects[0].id


# serve --------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from flagstaff.server import process

    settings = _settings(args)
    logs.configure(settings.log_level, settings.access_log)
    secure_data_dir(settings.data_dir)
    for notice in _with_store(settings, lambda store: bootstrap(store, settings)):
        logs.always(logging.WARNING, notice.message, **notice.fields)
    return process.serve(settings)


def cmd_consume(args: argparse.Namespace) -> int:
    from flagstaff.stream import consume

    settings = _settings(args)
    if settings.stream_url is None:
        raise SystemExit("flagstaff: consume needs --stream-url (or FLAGSTAFF_STREAM_URL)")
    if settings.database_url is None:
        raise SystemExit("flagstaff: consume needs --database-url (or FLAGSTAFF_DATABASE_URL)")
    logs.configure(settings.log_level, False)
    host, port = args.host or "127.0.0.1", args.port or 8001
    asyncio.run(consume.run(settings.stream_spec(), settings.database_url, host, port))
    return 0


# projects and keys ----------------------------------------------------------------------------


def _operator(store: Store, project_id: int) -> Caller[Store]:
    """Who the command acts as: the operator, an admin of ``project_id`` without a user (as
    the bootstrap key is)."""
    principal = Principal(project_id, Role.ADMIN, AuthMethod.PERSONAL_KEY)
    return Caller(store=store, accounts=store, project_id=project_id, principal=principal)


def _refused(exc: ApiError) -> SystemExit:
    return SystemExit(f"flagstaff: {exc.detail}")


def cmd_project_create(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Store) -> None:
        try:
            project = await accounts.new_project(store, accounts.ProjectInput(args.name))
        except ApiError as exc:
            raise _refused(exc) from None
        print(f"project {project.id} {project.name!r}")
        print(f"  project token: {project.api_token}")

    _with_store(settings, run)
    return 0


def cmd_project_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    projects = _with_store(settings, accounts.all_projects)
    for p in projects:
        print(f"{p.id}\t{p.name}\t{p.api_token}\t{p.created_at}")
    return 0


def _retention_days(raw: str) -> int | None:
    """``--event-retention-days``: a number of days, or ``forever``."""
    if raw.strip().lower() in {"forever", "none", "null"}:
        return None
    try:
        days = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of days, or 'forever'") from None
    problem = retention_problem(days)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem.replace("event_retention_days must be", "is"))
    return days


def cmd_project_update(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.name is None and args.event_retention_days is _UNSET:
        raise SystemExit("flagstaff: nothing to change: give --name or --event-retention-days")
    change = accounts.ProjectUpdate()
    if args.name is not None:
        change.name = args.name
    if args.event_retention_days is not _UNSET:
        change.event_retention_days = args.event_retention_days

    async def run(store: Store) -> None:
        project_id = await _project_id(store, args.project)
        try:
            updated = await accounts.update_project(_operator(store, project_id), change)
        except ApiError as exc:
            raise _refused(exc) from None
        days, project = updated.event_retention_days, updated.project
        kept = "forever" if days is None else f"{days} days"
        print(f"project {project.id} {project.name!r}: events kept {kept}")

    _with_store(settings, run)
    return 0


def cmd_key_create(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Store) -> None:
        project_id = await _project_id(store, args.project)
        body = accounts.PersonalApiKeyInput(args.label)
        try:
            created = await accounts.create_key(_operator(store, project_id), body)
        except ApiError as exc:
            raise _refused(exc) from None
        print(f"personal API key {created.key.id} for project {project_id} (shown only now):")
        print(f"  {created.value}")

    _with_store(settings, run)
    return 0


def cmd_user_create(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
    settings = _settings(args)

    async def run(store: Store) -> None:
        project_id = await _project_id(store, args.project)
        try:
            user, created = await accounts.join_project(
                store,
                args.email,
                password,
                Role(args.role),
                project_id,
                break_glass=args.break_glass,
            )
        except ApiError as exc:
            raise _refused(exc) from None
        state = "created" if created else "exists already (password unchanged)"
        glass = "; break-glass (password login even when single sign-on is the only way)"
        print(
            f"user {user.id} {user.email} {state}; {args.role} of project {project_id}"
            + (glass if args.break_glass else "")
        )

    _with_store(settings, run)
    return 0


# flags import / export -------------------------------------------------------------------------


def _show_progress(args: argparse.Namespace) -> bool:
    return bool(args.progress) or sys.stderr.isatty()


def cmd_flags_import(args: argparse.Namespace) -> int:
    from flagstaff.application import flag_transfer
    from flagstaff.cli import transfer

    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        source = flag_transfer.load_import_file(raw, args.file)
        group_types = flag_transfer.merge_group_types(
            source.group_types, transfer.parse_group_type_option(args.group_type)
        )
    except flag_transfer.TransferError as exc:
        raise SystemExit(f"flagstaff: {exc}") from None
    settings = _settings(args)
    progress = transfer.Progress("importing", len(source.flags), _show_progress(args))

    async def run(store: Store) -> flag_transfer.ImportReport:
        project_id = await _project_id(store, args.project)
        return await flag_transfer.run_import(
            store, project_id, source, group_types, dry_run=args.dry_run, progress=progress
        )

    report = _with_store(settings, run)
    for line in transfer.report_lines(report, dry_run=args.dry_run, every_flag=args.dry_run):
        print(line)
    return 1 if report.rejected else 0


def cmd_flags_export(args: argparse.Namespace) -> int:
    from flagstaff.application import flag_transfer
    from flagstaff.cli import transfer

    settings = _settings(args)
    progress = transfer.Progress("exporting", 0, _show_progress(args))

    async def run(store: Store) -> flag_transfer.FlagExport:
        project_id = await _project_id(store, args.project)
        return await flag_transfer.run_export(store, project_id, progress)

    exported = _with_store(settings, run)
    data = msgspec.json.format(msgspec.json.encode(exported), indent=2)
    if args.output and args.output != "-":
        Path(args.output).write_bytes(data + b"\n")
    else:
        sys.stdout.buffer.write(data + b"\n")
    return 0


# flags explain -------------------------------------------------------------------------------


def _json_option(text: str | None, option: str) -> dict[str, Any]:
    """A JSON object given on the command line (absent: none)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise SystemExit(f"flagstaff: {option} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"flagstaff: {option} must be a JSON object")
    return value


def cmd_flags_explain(args: argparse.Namespace) -> int:
    """Print how one flag evaluates for one distinct id (``application.flags.explain``)."""
    from flagstaff.application.flags import ExplainError, explain_from_store
    from flagstaff.flags.explain import render

    try:
        person = _json_option(args.person_properties, "--person-properties")
        groups = _json_option(args.groups, "--groups")

        async def run(store: Store) -> Any:
            project_id = await _project_id(store, args.project)
            return await explain_from_store(
                store,
                project_id,
                args.key,
                args.distinct_id,
                person_properties=person,
                groups=groups,
                device_id=args.device_id,
            )

        explanation = _with_store(_settings(args), run)
    except ExplainError as error:
        print(f"flagstaff: {error}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(explanation.to_dict()) + b"\n")
    else:
        print(render(explanation))
    return 0


# events export --------------------------------------------------------------------------------


def _since_ms(raw: str | None) -> int | None:
    if not raw:
        return None
    parsed = iso_to_ms(raw)
    if parsed is None:
        raise SystemExit(f"flagstaff: --since must be an ISO 8601 date or time, got {raw!r}")
    return parsed


def cmd_events_export(args: argparse.Namespace) -> int:
    from flagstaff.application.people import event_json, exported_events

    settings = _settings(args)
    since = _since_ms(args.since)
    out = sys.stdout.buffer

    async def run(store: Store) -> int:
        project_id = await _project_id(store, args.project)
        n = 0
        async for batch in exported_events(store, project_id, since):
            out.write(b"".join(msgspec.json.encode(event_json(e)) + b"\n" for e in batch))
            n += len(batch)
        out.flush()
        return n

    n = _with_store(settings, run)
    print(f"{n} events exported", file=sys.stderr)
    return 0


def cmd_experiments_recompute(args: argparse.Namespace) -> int:
    """Rebuild experiments' aggregates from the stored events (after an import, or to check)."""
    from flagstaff.application.experiments import recompute

    settings = _settings(args)

    async def run(store: Store) -> list[str]:
        project_id = await _project_id(store, args.project)
        try:
            done = await recompute(store, project_id, args.experiment)
        except ApiError as exc:
            raise _refused(exc) from None
        return [
            f"experiment {r.experiment_id}: not started, nothing to compute"
            if r.events_read is None
            else f"experiment {r.experiment_id}: {r.events_read} events read, exposed {r.exposed}"
            for r in done
        ]

    lines = _with_store(settings, run)
    print("\n".join(lines) if lines else "no started experiment")
    return 0


def cmd_flags_recompute_usage(args: argparse.Namespace) -> int:
    """Rebuild the flag usage rollup from the stored events (after an upgrade: the history)."""
    settings = _settings(args)

    async def run(store: Store) -> str:
        project_id = await _project_id(store, args.project)
        read = await flag_usage.recompute_usage(store, project_id)
        return f"project {project_id}: {read} $feature_flag_called events read"

    print(_with_store(settings, run))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from flagstaff.cli.backup import POSTGRES_RECIPE, BackupError, backup

    db = sqlite_path(_settings(args))
    if db is None:
        print(f"flagstaff: {POSTGRES_RECIPE}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        size = backup(db, Path(args.path))
    except BackupError as exc:
        raise SystemExit(f"flagstaff: {exc}") from None
    took = time.monotonic() - started
    print(f"backed up {db} to {args.path} ({size / 1e6:.1f} MB, {took:.1f} s)")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from flagstaff.cli.backup import POSTGRES_RECIPE, BackupError, restore

    db = sqlite_path(_settings(args))
    if db is None:
        print(f"flagstaff: {POSTGRES_RECIPE}", file=sys.stderr)
        return 2
    try:
        kept = restore(Path(args.path), db)
    except BackupError as exc:
        raise SystemExit(f"flagstaff: {exc}") from None
    print(f"restored {args.path} to {db}")
    if kept is not None:
        print(f"  the store it replaced is kept at {kept} (delete it when satisfied)")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    _with_store(settings, lambda store: store.ping())
    print("schema is up to date")
    return 0


# parser ----------------------------------------------------------------------------------------


def _store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="where the embedded store lives (default ./flagstaff-data)")
    p.add_argument("--database-url", help="postgresql://... to use PostgreSQL instead")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flagstaff",
        description="Feature flags and product events, speaking the PostHog public API.",
    )
    parser.add_argument("--version", action="version", version=f"flagstaff {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="log one JSON line per request (also FLAGSTAFF_ACCESS_LOG=true)",
    )
    serve.add_argument(
        "--stream-url",
        help="nats://host:4222,... : capture queues events in a replicated JetStream stream "
        "(needs a PostgreSQL --database-url; run 'flagstaff consume' to apply them)",
    )
    _store_options(serve)
    serve.set_defaults(fn=cmd_serve)

    consume = sub.add_parser(
        "consume", help="apply the events of the stream (--stream-url) to PostgreSQL"
    )
    consume.add_argument("--stream-url", help="nats://host:4222,... (or FLAGSTAFF_STREAM_URL)")
    consume.add_argument("--host", help="address of the ops port (default 127.0.0.1)")
    consume.add_argument(
        "--port", type=int, help="ops port: /_health, /_ready (with the lag), /metrics (8001)"
    )
    consume.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    consume.add_argument("--database-url", help="postgresql://... (or FLAGSTAFF_DATABASE_URL)")
    consume.set_defaults(fn=cmd_consume)

    project = sub.add_parser("project", help="manage projects").add_subparsers(
        dest="action", required=True
    )
    create = project.add_parser("create", help="create a project and print its token")
    create.add_argument("name")
    _store_options(create)
    create.set_defaults(fn=cmd_project_create)
    pupdate = project.add_parser(
        "update", help="rename a project or set how long its events are kept"
    )
    pupdate.add_argument("--project", type=int, help="project id (needed with several)")
    pupdate.add_argument("--name", help="a new name")
    pupdate.add_argument(
        "--event-retention-days",
        type=_retention_days,
        default=_UNSET,
        metavar="N|forever",
        help="delete events (and ingestion warnings) older than N days; 'forever' keeps them",
    )
    _store_options(pupdate)
    pupdate.set_defaults(fn=cmd_project_update)
    plist = project.add_parser("list", help="list projects")
    _store_options(plist)
    plist.set_defaults(fn=cmd_project_list)

    key = sub.add_parser("key", help="manage personal API keys").add_subparsers(
        dest="action", required=True
    )
    kcreate = key.add_parser("create", help="create a personal API key and print it once")
    kcreate.add_argument("--project", type=int, help="project id (needed with several)")
    kcreate.add_argument("--label", default="cli key")
    _store_options(kcreate)
    kcreate.set_defaults(fn=cmd_key_create)

    user = sub.add_parser("user", help="manage console users").add_subparsers(
        dest="action", required=True
    )
    ucreate = user.add_parser(
        "create", help="create a console user (or give an existing one a role in a project)"
    )
    ucreate.add_argument("--email", required=True)
    ucreate.add_argument("--password", required=True, help="the password, or - to read stdin")
    ucreate.add_argument("--role", choices=["admin", "editor", "viewer"], default="admin")
    ucreate.add_argument("--project", type=int, help="project id (needed with several)")
    ucreate.add_argument(
        "--break-glass",
        action="store_true",
        help="this user may log in by password even with FLAGSTAFF_OIDC_ONLY (an emergency "
        "account for when the identity provider is down)",
    )
    _store_options(ucreate)
    ucreate.set_defaults(fn=cmd_user_create)

    flags = sub.add_parser(
        "flags", help="import, export, explain feature flags; their usage"
    ).add_subparsers(dest="action", required=True)
    fimport = flags.add_parser("import", help="import a PostHog flags export (JSON)")
    fimport.add_argument("file", help="a JSON file: a list of flags or {results: [...]}; - = stdin")
    fimport.add_argument("--project", type=int)
    fimport.add_argument(
        "--dry-run", action="store_true", help="print the plan per flag and write nothing"
    )
    fimport.add_argument(
        "--group-type",
        action="append",
        default=[],
        metavar="INDEX=NAME",
        help="create this group type (e.g. 0=company) before the flags; repeatable",
    )
    fimport.add_argument("--progress", action="store_true", help="a progress bar even off a TTY")
    _store_options(fimport)
    fimport.set_defaults(fn=cmd_flags_import)
    fexport = flags.add_parser("export", help="write every flag as {results: [...]}")
    fexport.add_argument("-o", "--output", help="file to write (default stdout)")
    fexport.add_argument("--project", type=int)
    fexport.add_argument("--progress", action="store_true", help="a progress bar even off a TTY")
    _store_options(fexport)
    fexport.set_defaults(fn=cmd_flags_export)

    fexplain = flags.add_parser("explain", help="show how one flag evaluates, step by step")
    fexplain.add_argument("key", help="the flag key")
    fexplain.add_argument("--distinct-id", required=True)
    fexplain.add_argument("--project", type=int)
    fexplain.add_argument("--person-properties", help="JSON object over the stored ones")
    fexplain.add_argument("--groups", help='JSON object, e.g. {"company": "acme"}')
    fexplain.add_argument("--device-id")
    fexplain.add_argument("--json", action="store_true", help="the explanation as JSON")
    _store_options(fexplain)
    fexplain.set_defaults(fn=cmd_flags_explain)
    fusage = flags.add_parser(
        "recompute-usage",
        help="rebuild the flags' usage (checks per day and value) from the stored events",
    )
    fusage.add_argument("--project", type=int)
    _store_options(fusage)
    fusage.set_defaults(fn=cmd_flags_recompute_usage)

    events = sub.add_parser("events", help="export events").add_subparsers(
        dest="action", required=True
    )
    eexport = events.add_parser("export", help="stream events as JSON lines to stdout")
    eexport.add_argument("--since", help="ISO 8601 date or time: only events from then on")
    eexport.add_argument("--project", type=int)
    _store_options(eexport)
    eexport.set_defaults(fn=cmd_events_export)

    experiments = sub.add_parser("experiments", help="experiment aggregates").add_subparsers(
        dest="action", required=True
    )
    xrecompute = experiments.add_parser(
        "recompute", help="rebuild experiments' exposure and metric aggregates from stored events"
    )
    xrecompute.add_argument("--experiment", type=int, help="only this experiment")
    xrecompute.add_argument("--project", type=int)
    _store_options(xrecompute)
    xrecompute.set_defaults(fn=cmd_experiments_recompute)

    bkp = sub.add_parser(
        "backup", help="write a consistent copy of the SQLite store to PATH, while it serves"
    )
    bkp.add_argument("path", help="the backup file to create (must not exist)")
    _store_options(bkp)
    bkp.set_defaults(fn=cmd_backup)
    rst = sub.add_parser(
        "restore", help="replace the SQLite store by a backup (the server must be stopped)"
    )
    rst.add_argument("path", help="a file written by 'flagstaff backup'")
    _store_options(rst)
    rst.set_defaults(fn=cmd_restore)

    migrate = sub.add_parser("migrate", help="apply schema migrations and exit")
    _store_options(migrate)
    migrate.set_defaults(fn=cmd_migrate)
    return parser


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    """A command's error on stderr; ``serve`` logs it as JSON like everything else it says."""
    if args.command in ("serve", "consume"):
        if not logs.logger.handlers:
            logs.configure("info")
        logs.always(logging.ERROR, message)
    else:
        print(f"flagstaff: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except ValueError as exc:  # ConfigError included
        return _fail(args, str(exc), 2)
    except SystemExit as exc:
        if args.command != "serve" or not isinstance(exc.code, str):
            raise
        return _fail(args, exc.code.removeprefix("flagstaff: "), 1)
