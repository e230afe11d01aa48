"""The ``flagstaff`` command: serve, project, key, flags import/export, events export."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from flagstaff import __version__
from flagstaff.bootstrap import bootstrap
from flagstaff.config import ConfigError, Settings
from flagstaff.http.errors import ApiError
from flagstaff.services import make_store
from flagstaff.store.base import Conflict, Store

T = TypeVar("T")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        workers=getattr(args, "workers", None),
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        database_url=getattr(args, "database_url", None),
        log_level=getattr(args, "log_level", None),
    )


def _with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def run() -> T:
        store = make_store(settings)
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(run())


async def _project_id(store: Store, wanted: int | None) -> int:
    projects = await store.list_projects()
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


_INTERFACES = {"rsgi": "rsgi", "asgi": "asgi"}


def cmd_serve(args: argparse.Namespace) -> int:
    from granian import Granian
    from granian.constants import Interfaces, Loops

    settings = _settings(args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for line in _with_store(settings, lambda store: bootstrap(store, settings)):
        print(line, flush=True)
    shutil.rmtree(settings.data_dir / "metrics", ignore_errors=True)
    ingestd = None
    if settings.database_url is None:
        ingestd, socket_path = _start_ingest_writer(settings)
        settings = dataclasses.replace(settings, ingest_socket=socket_path)
    os.environ.update(settings.to_env())
    print(
        f"flagstaff {__version__} listening on http://{settings.host}:{settings.port} "
        f"({settings.workers} worker{'s' if settings.workers > 1 else ''}, "
        f"{'PostgreSQL' if settings.database_url else f'SQLite at {settings.sqlite_path}'})",
        file=sys.stderr,
        flush=True,
    )
    server = Granian(
        "flagstaff.app:create_app",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI
        if os.environ.get("FLAGSTAFF_INTERFACE") == "asgi"
        else Interfaces.RSGI,
        loop=Loops.uvloop,
        workers=settings.workers,
        websockets=False,
        log_enabled=settings.log_level == "debug",
        backlog=2048,
    )
    try:
        server.serve()
    finally:
        if ingestd is not None:
            _stop_ingest_writer(ingestd)
    return 0


def _start_ingest_writer(settings: Settings) -> tuple[subprocess.Popen[bytes], str]:
    """Start the data dir's single ingest writer and wait until its socket answers."""
    socket_path = os.path.join(
        tempfile.gettempdir(), f"flagstaff-{os.getpid()}-{secrets.token_hex(4)}.sock"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flagstaff.store.sqlite_ingestd",
            str(settings.sqlite_path),
            socket_path,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != b"ready\n":
        proc.wait(10)
        raise SystemExit("flagstaff: the ingest writer did not start (see the messages above)")
    return proc, socket_path


def _stop_ingest_writer(proc: subprocess.Popen[bytes]) -> None:
    """Close its stdin: it finishes what is queued, commits and exits."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# projects and keys ----------------------------------------------------------------------------


def cmd_project_create(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Store) -> None:
        project = await store.create_project(args.name)
        print(f"project {project.id} {project.name!r}")
        print(f"  project token: {project.api_token}")

    _with_store(settings, run)
    return 0


def cmd_project_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    projects = _with_store(settings, lambda store: store.list_projects())
    for p in projects:
        print(f"{p.id}\t{p.name}\t{p.api_token}\t{p.created_at}")
    return 0


def cmd_key_create(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Store) -> None:
        project_id = await _project_id(store, args.project)
        key, secret = await store.create_personal_key(project_id, args.label)
        print(f"personal API key {key.id} for project {project_id} (shown only now):")
        print(f"  {secret}")

    _with_store(settings, run)
    return 0


# flags import / export -------------------------------------------------------------------------


def _progress(done: int, total: int) -> None:
    if not sys.stderr.isatty() and done not in (total,):
        return
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _load_flags_file(path: str) -> list[Any]:
    raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise SystemExit(f"flagstaff: {path} is not valid JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        return data["results"]
    if isinstance(data, list):
        return data
    raise SystemExit(f"flagstaff: {path} must hold a list of flags or {{'results': [...]}}")


def cmd_flags_import(args: argparse.Namespace) -> int:
    from flagstaff.http.admin_models import flag_from_input

    settings = _settings(args)
    items = _load_flags_file(args.file)

    async def run(store: Store) -> tuple[int, int, list[str]]:
        project_id = await _project_id(store, args.project)
        created = updated = 0
        rejected: list[str] = []
        for i, item in enumerate(items, 1):
            label = item.get("key", f"#{i}") if isinstance(item, dict) else f"#{i}"
            try:
                if isinstance(item, dict) and item.get("deleted"):
                    raise ApiError(400, "skipped", "deleted in the export")
                key = item.get("key") if isinstance(item, dict) else None
                current = (
                    await store.get_flag_by_key(project_id, key) if isinstance(key, str) else None
                )
                if current is None:
                    await store.create_flag(project_id, flag_from_input(item))
                    created += 1
                else:
                    await store.update_flag(
                        project_id, current["id"], flag_from_input(item, current)
                    )
                    updated += 1
            except ApiError as exc:
                rejected.append(f"{label}: {exc.detail}")
            except Conflict as exc:
                rejected.append(f"{label}: {exc.message}")
            _progress(i, len(items))
        return created, updated, rejected

    created, updated, rejected = _with_store(settings, run)
    print(f"{created} created, {updated} updated, {len(rejected)} rejected")
    for line in rejected:
        print(f"  rejected {line}")
    return 1 if rejected and not (created or updated) else 0


def cmd_flags_export(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def run(store: Store) -> list[dict[str, Any]]:
        project_id = await _project_id(store, args.project)
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await store.list_flags(project_id, 500, offset)
            out.extend(page.results)
            offset += 500
            if offset >= page.count:
                return sorted(out, key=lambda f: f["id"])

    flags = _with_store(settings, run)
    data = msgspec.json.format(msgspec.json.encode({"results": flags}), indent=2)
    if args.output and args.output != "-":
        Path(args.output).write_bytes(data + b"\n")
    else:
        sys.stdout.buffer.write(data + b"\n")
    return 0


# events export --------------------------------------------------------------------------------


def _since_ms(raw: str | None) -> int | None:
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(
            f"flagstaff: --since must be an ISO 8601 date or time, got {raw!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def cmd_events_export(args: argparse.Namespace) -> int:
    from flagstaff.http.admin import event_json

    settings = _settings(args)
    since = _since_ms(args.since)
    out = sys.stdout.buffer

    async def run(store: Store) -> int:
        project_id = await _project_id(store, args.project)
        n = 0
        async for batch in store.iter_events(project_id, since, 1000):
            out.write(b"".join(msgspec.json.encode(event_json(e)) + b"\n" for e in batch))
            n += len(batch)
        out.flush()
        return n

    n = _with_store(settings, run)
    print(f"{n} events exported", file=sys.stderr)
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
    _store_options(serve)
    serve.set_defaults(fn=cmd_serve)

    project = sub.add_parser("project", help="manage projects").add_subparsers(
        dest="action", required=True
    )
    create = project.add_parser("create", help="create a project and print its token")
    create.add_argument("name")
    _store_options(create)
    create.set_defaults(fn=cmd_project_create)
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

    flags = sub.add_parser("flags", help="import or export feature flags").add_subparsers(
        dest="action", required=True
    )
    fimport = flags.add_parser("import", help="import a PostHog flags export (JSON)")
    fimport.add_argument("file", help="a JSON file: a list of flags or {results: [...]}; - = stdin")
    fimport.add_argument("--project", type=int)
    _store_options(fimport)
    fimport.set_defaults(fn=cmd_flags_import)
    fexport = flags.add_parser("export", help="write every flag as {results: [...]}")
    fexport.add_argument("-o", "--output", help="file to write (default stdout)")
    fexport.add_argument("--project", type=int)
    _store_options(fexport)
    fexport.set_defaults(fn=cmd_flags_export)

    events = sub.add_parser("events", help="export events").add_subparsers(
        dest="action", required=True
    )
    eexport = events.add_parser("export", help="stream events as JSON lines to stdout")
    eexport.add_argument("--since", help="ISO 8601 date or time: only events from then on")
    eexport.add_argument("--project", type=int)
    _store_options(eexport)
    eexport.set_defaults(fn=cmd_events_export)

    migrate = sub.add_parser("migrate", help="apply schema migrations and exit")
    _store_options(migrate)
    migrate.set_defaults(fn=cmd_migrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except ConfigError as exc:
        print(f"flagstaff: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"flagstaff: {exc}", file=sys.stderr)
        return 2
