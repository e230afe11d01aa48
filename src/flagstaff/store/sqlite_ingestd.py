"""The SQLite ingest writer: one process per data dir that applies every ingestion batch.

``flagstaff serve`` starts it before the HTTP workers and stops it after them. Workers decode
and normalise events in parallel and send them here over a Unix socket; this process runs the
person and group rules and the group-committed transactions, and answers each request after
its commit. Being the only process that writes persons, it keeps them in memory
(:class:`~flagstaff.store.person_cache.PersonCache`) instead of reading them back per batch.

It ignores SIGINT and SIGTERM (a Ctrl-C reaches the whole process group, and the workers must
finish their in-flight requests first) and exits when its standard input closes: the serving
process closes it after the workers stopped, or the kernel does when that process died.

Run: ``python -m flagstaff.store.sqlite_ingestd DB_PATH SOCKET_PATH``
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sys
import time
from pathlib import Path

from flagstaff.store.base import IngestResult
from flagstaff.store.ingest_protocol import (
    Outbox,
    read_frame,
    request_decoder,
    request_encoder,
)
from flagstaff.store.person_cache import PersonCache
from flagstaff.store.sqlite_ingest import IngestRequest, apply_many
from flagstaff.store.sqlite_writer import Writer

READY = b"ready\n"
# The automatic checkpoint runs inside the commit that crosses it; every 64 MB of WAL instead
# of SQLite's 4 MB, pages rewritten many times (indexes, persons) are copied back once.
WAL_CHECKPOINT_PAGES = 16384


def lock_data_dir(db_path: Path) -> int:
    """Hold the ingest lock for this process's life: one ingest writer per database."""
    fd = os.open(str(db_path) + ".ingest-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SystemExit(f"another Flagstaff is already writing to {db_path}") from None
    return fd


class IngestServer:
    def __init__(self, db_path: Path, socket_path: Path) -> None:
        self.db_path = db_path
        self.socket_path = socket_path
        self.cache = PersonCache()
        self.writer = Writer(
            db_path, on_failure=self.cache.clear, wal_autocheckpoint_pages=WAL_CHECKPOINT_PAGES
        )
        self._connections: set[asyncio.Task[None]] = set()
        self._pending: list[tuple[IngestRequest, asyncio.Future[IngestResult]]] = []

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.writer.start(loop)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
        await self._wait_for_stdin_close()
        server.close()
        await server.wait_closed()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.writer.stop()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _wait_for_stdin_close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.buffer.read)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        in_flight: set[asyncio.Task[None]] = set()
        outbox = Outbox(writer)
        try:
            while True:
                try:
                    payload = await read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                answer = asyncio.create_task(self._answer(payload, outbox))
                in_flight.add(answer)
                answer.add_done_callback(in_flight.discard)
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            writer.close()
            self._connections.discard(task)

    async def _answer(self, payload: bytes, outbox: Outbox) -> None:
        request_id = 0
        try:
            request_id, project_id, events, drops = request_decoder.decode(payload)
            future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
            if not self._pending:
                asyncio.get_running_loop().call_soon(self._flush)
            self._pending.append(((project_id, events, drops), future))
            answer = (request_id, await future, None)
        except Exception as exc:
            answer = (request_id, None, f"{type(exc).__name__}: {exc}")
        outbox.send(request_encoder.encode(answer))

    def _flush(self) -> None:
        """Hand everything that arrived during this loop tick to the writer as one job."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        requests = [request for request, _ in pending]
        now_ms = int(time.time() * 1000)
        cache = self.cache
        job = self.writer.submit(lambda conn: apply_many(conn, requests, now_ms, cache))

        def settle(done: asyncio.Future[list[IngestResult | Exception]]) -> None:
            error = done.exception()
            results = [error] * len(pending) if error is not None else done.result()
            for (_, future), result in zip(pending, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)  # type: ignore[arg-type]

        job.add_done_callback(settle)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m flagstaff.store.sqlite_ingestd DB_PATH SOCKET_PATH", file=sys.stderr
        )
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    db_path, socket_path = Path(args[0]), Path(args[1])
    lock = lock_data_dir(db_path)
    try:
        asyncio.run(IngestServer(db_path, socket_path).serve())
    finally:
        os.close(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
