"""The SQLite ingest writer: one process per data dir that applies every ingestion batch.

``flagstaff serve`` starts it before the HTTP workers and stops it after them. Workers decode
and normalise events in parallel and send them here over a Unix socket; this process runs the
person and group rules and the transactions, and answers each request after its commit. Being
the only process that writes persons, it keeps them in memory
(:class:`~flagstaff.store.sqlite.person_cache.PersonCache`) instead of reading them back per batch.

One ``select`` loop reads every frame that has arrived on any connection, runs the rules over
them and plans their writes (:func:`~flagstaff.store.sqlite.ingest.plan_ingest`), while a
second thread executes the previous batch's plan in one transaction and commits it (fsync);
SQLite releases the GIL while it works, so the two overlap. A small batch (under
:data:`PLAN_ALONGSIDE`), beside which nothing would be planned, commits on this thread
instead: two thread switches less. Each batch is answered after its commit. Requests that
arrive meanwhile wait in the socket buffers and form the next batch: group commit with no
timer. When no request is waiting, it indexes stored events by distinct id
(:mod:`~flagstaff.store.sqlite.event_index`). It also deletes expired events in bounded
steps, between batches (:mod:`~flagstaff.store.sqlite.retention`).

It ignores SIGINT and SIGTERM (a Ctrl-C reaches the whole process group, and the workers must
finish their in-flight requests first) and exits once its standard input is closed and every
worker has disconnected: the serving process closes it after the workers stopped, or the
kernel does when that process died.

Run: ``python -m flagstaff.store.sqlite.ingestd DB_PATH SOCKET_PATH [MMAP_MB [PERSON_CACHE_MB]]``
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import selectors
import signal
import socket
import sqlite3
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import msgspec

from flagstaff.common import clock
from flagstaff.ops import logs
from flagstaff.ops.allocator import tune_allocator
from flagstaff.store.records import IngestResult
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.ingest import (
    EMPTY_RESULT,
    IngestRequest,
    PersonIds,
    WritePlan,
    apply_many,
    by_project,
    execute_plan,
    plan_ingest,
)
from flagstaff.store.sqlite.person_cache import DEFAULT_PERSON_CACHE_MB, PersonCache
from flagstaff.store.sqlite.person_version import person_version
from flagstaff.store.sqlite.protocol import HEADER, request_decoder, request_encoder, take_frames
from flagstaff.store.sqlite.retention import RetentionRunner
from flagstaff.store.sqlite.writer import DEFAULT_MMAP_MB, connect, write_transaction

READY = b"ready\n"
# The automatic checkpoint runs inside the commit that crosses it; every 64 MB of WAL instead
# of SQLite's default 1,000 pages, pages rewritten many times (indexes, persons) are copied
# back once.
WAL_CHECKPOINT_BYTES = 64 * 1024 * 1024
# Waiting this long with nothing to do counts as idle: time to index events.
IDLE_SECONDS = 0.05
_READ_SIZE = 1 << 20
# A batch smaller than this is not planned while another commits, but joined by what arrives
# meanwhile: with few events, the commit is the work.
PLAN_ALONGSIDE = 64 * 1024


def lock_data_dir(db_path: Path) -> int:
    """Hold the ingest lock for this process's life: one ingest writer per database."""
    fd = os.open(str(db_path) + ".ingest-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SystemExit(f"another Flagstaff is already writing to {db_path}") from None
    return fd


class Peer:
    """One worker's connection: bytes in, complete frames out, answers buffered."""

    __slots__ = ("inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()

    def receive(self) -> tuple[list[bytes], bool]:
        """Frames complete so far, and whether the worker closed its end."""
        closed = False
        while True:
            try:
                chunk = self.sock.recv(_READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            self.inbox += chunk
            if len(chunk) < _READ_SIZE:
                break
        return take_frames(self.inbox), closed

    def queue(self, payload: bytes) -> None:
        self.outbox += HEADER.pack(len(payload))
        self.outbox += payload

    def flush(self) -> bool:
        """Send what the socket takes; True when everything left."""
        if self.outbox:
            try:
                sent = self.sock.send(self.outbox)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.outbox.clear()
                return True
            del self.outbox[:sent]
        return not self.outbox


def _size(frames: list[tuple[Peer, bytes]]) -> int:
    return sum(len(payload) for _, payload in frames)


class IngestServer:
    def __init__(
        self,
        db_path: Path,
        socket_path: Path,
        mmap_mb: int = DEFAULT_MMAP_MB,
        person_cache_mb: int = DEFAULT_PERSON_CACHE_MB,
    ) -> None:
        self.db_path = db_path
        self.mmap_mb = mmap_mb
        self.socket_path = socket_path
        self.cache = PersonCache(person_cache_mb * 1024 * 1024)
        self.person_version = person_version(db_path)
        self.conn: sqlite3.Connection | None = None
        self._lock_fd = -1
        self._selector = selectors.DefaultSelector()
        self._peers: dict[int, Peer] = {}
        self._unindexed = 0
        self._stopping = False
        self._ids = PersonIds()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="flagstaff-ingest-sql")
        self._in_flight: InFlight | None = None
        self._replan = False
        self.commits = 0
        self.retention = RetentionRunner()

    def serve(self) -> None:
        self.conn = connect(self.db_path, mmap_mb=self.mmap_mb)
        page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
        self.conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_BYTES // page_size}")
        self._lock_fd = os.open(str(self.db_path) + ".writer-lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._unindexed = event_index.unindexed(self.conn)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        listener.listen(128)
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
        try:
            self._loop(listener)
        finally:
            self._selector.close()
            listener.close()
            for peer in self._peers.values():
                peer.sock.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            self.conn.close()
            os.close(self._lock_fd)
            self.person_version.close()

    def _loop(self, listener: socket.socket) -> None:
        self._stopping = False
        while not self._stopping or self._peers or self._in_flight is not None:
            if self._in_flight is not None:
                ready = self._selector.select(0)
            elif self._unindexed or self.retention.pending:
                ready = self._selector.select(IDLE_SECONDS)
            else:
                ready = self._selector.select(self.retention.seconds_to_check())
            frames: list[tuple[Peer, bytes]] = []
            self._handle(ready, listener, frames)
            if self._in_flight is not None and _size(frames) < PLAN_ALONGSIDE:
                # Little arrived: rather than plan it beside the batch in flight, wait for that
                # batch and take whatever arrived meanwhile too (fewer, larger commits).
                self._finish()
                self._handle(self._selector.select(0), listener, frames)
            elif not frames:
                if not ready:
                    self._index_some()
                    self._expire_some(busy=False)
                continue
            if frames:
                self._apply(frames)
        self._executor.shutdown()

    def _handle(
        self,
        ready: list[tuple[selectors.SelectorKey, int]],
        listener: socket.socket,
        frames: list[tuple[Peer, bytes]],
    ) -> None:
        for key, mask in ready:
            if key.data == "accept":
                self._accept(listener)
            elif key.data == "stdin":
                if not os.read(key.fd, 4096):
                    self._stopping = True
                    self._selector.unregister(key.fd)
                    self._selector.unregister(listener)
            else:
                peer: Peer = key.data
                if mask & selectors.EVENT_READ:
                    self._read(peer, frames)
                if mask & selectors.EVENT_WRITE and peer.sock.fileno() in self._peers:
                    self._flush(peer)

    def _accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            sock.setblocking(False)
            peer = Peer(sock)
            self._peers[sock.fileno()] = peer
            self._selector.register(sock, selectors.EVENT_READ, peer)

    def _read(self, peer: Peer, frames: list[tuple[Peer, bytes]]) -> None:
        try:
            received, closed = peer.receive()
        except ValueError:
            received, closed = [], True
        frames.extend((peer, payload) for payload in received)
        if closed:
            self._drop(peer)

    def _drop(self, peer: Peer) -> None:
        fd = peer.sock.fileno()
        if self._peers.pop(fd, None) is not None:
            self._selector.unregister(peer.sock)
            peer.sock.close()

    def _flush(self, peer: Peer) -> None:
        if peer.sock.fileno() not in self._peers:
            return
        events = (
            selectors.EVENT_READ if peer.flush() else selectors.EVENT_READ | selectors.EVENT_WRITE
        )
        self._selector.modify(peer.sock, events, peer)

    def _apply(self, frames: list[tuple[Peer, bytes]]) -> None:
        """Plan every frame read in this turn while the previous batch commits, then send it.

        Planning reads the database only through :meth:`_committed`, which first waits for the
        batch in flight. If that batch fails, the cached persons the new plan was built on are
        wrong: the plan is made again from the database.
        """
        accepted: list[tuple[Peer, int]] = []
        requests: list[IngestRequest] = []
        for peer, payload in frames:
            try:
                request_id, project_id, events, drops = request_decoder.decode(payload)
            except Exception as exc:
                peer.queue(
                    request_encoder.encode((_request_id(payload), None, f"bad request: {exc}"))
                )
                continue
            accepted.append((peer, request_id))
            requests.append((project_id, events, drops))
        if requests:
            now_ms = clock.now_ms()
            batch = self._plan(requests, now_ms)
            self._finish()
            if self._replan:
                self._replan = False
                self.cache.clear()
                self._ids.reset()
                batch = self._plan(requests, now_ms)
            if batch is None:
                self._answer(accepted, self._one_by_one(requests, now_ms))
            else:
                index = self._unindexed >= event_index.BATCH
                plans = [plan for _, plan in batch]
                if _size(frames) < PLAN_ALONGSIDE:
                    # Little to write: nothing would be planned beside it (see _loop), so
                    # handing it to the SQL thread would only cost two thread switches.
                    future: Future[tuple[list[IngestResult], int]] = Future()
                    try:
                        future.set_result(self._execute(plans, index))
                    except Exception as exc:
                        future.set_exception(exc)
                    self._in_flight = InFlight(future, accepted, requests, batch, now_ms)
                    self._finish()
                else:
                    future = self._executor.submit(self._execute, plans, index)
                    self._in_flight = InFlight(future, accepted, requests, batch, now_ms)
        for peer in {peer for peer, _ in frames}:
            self._flush(peer)

    def _committed(self) -> sqlite3.Connection:
        """The connection, once nothing is in flight: what plans read must be committed."""
        self._finish()
        assert self.conn is not None
        return self.conn

    def _plan(
        self, requests: list[IngestRequest], now_ms: int
    ) -> list[tuple[list[int], WritePlan]] | None:
        """One plan per project, events in arrival order; None if the rules failed."""
        try:
            return [
                (
                    batch.indexes,
                    plan_ingest(
                        self._committed,
                        batch.project_id,
                        batch.events,
                        batch.drops,
                        now_ms,
                        self._ids,
                        self.cache,
                    ),
                )
                for batch in by_project(requests)
            ]
        except Exception:
            self._finish()
            self.cache.clear()
            self._ids.reset()
            return None

    def _execute(self, plans: list[WritePlan], index: bool) -> tuple[list[IngestResult], int]:
        """On the SQL thread: one transaction for the plans, then maybe index some events."""
        conn = self.conn
        assert conn is not None
        # Person, group and override changes move the person version before any answer.
        changed = self.person_version.bump if any(plan.steps for plan in plans) else None
        with write_transaction(conn, self._lock_fd, changed):
            results = [execute_plan(conn, plan) for plan in plans]
        moved = self._index_transaction() if index else 0
        self._expire_some(busy=True)
        return results, moved

    def _finish(self) -> None:
        """Wait for the batch in flight and queue its answers."""
        flight = self._in_flight
        if flight is None:
            return
        self._in_flight = None
        try:
            results, moved = flight.future.result()
        except Exception:
            # The rules had changed cached persons for this batch and the next one's plan.
            self.cache.clear()
            self._ids.reset()
            self._replan = True
            self._answer(flight.accepted, self._one_by_one(flight.requests, flight.now_ms))
        else:
            self.commits += 1
            out: list[IngestResult | Exception] = [EMPTY_RESULT] * len(flight.requests)
            for (indexes, _), result in zip(flight.batch, results, strict=True):
                out[indexes[0]] = result
                self._unindexed += result.ingested
            self._unindexed = max(0, self._unindexed - moved)
            self._answer(flight.accepted, out)
        for peer in {peer for peer, _ in flight.accepted}:
            self._flush(peer)

    def _answer(
        self, accepted: list[tuple[Peer, int]], results: list[IngestResult | Exception]
    ) -> None:
        for (peer, request_id), result in zip(accepted, results, strict=True):
            answer: tuple[int, IngestResult | None, str | None]
            if isinstance(result, BaseException):
                answer = (request_id, None, f"{type(result).__name__}: {result}")
            else:
                answer = (request_id, result, None)
            peer.queue(request_encoder.encode(answer))

    def _one_by_one(
        self, requests: list[IngestRequest], now_ms: int
    ) -> list[IngestResult | Exception]:
        """The slow path after a failure: each request alone, so a bad one fails only itself."""
        conn = self.conn
        assert conn is not None and self._in_flight is None
        try:
            with write_transaction(conn, self._lock_fd, self.person_version.bump):
                results = apply_many(conn, requests, now_ms, self.cache)
        except Exception as exc:
            self.cache.clear()
            return [exc] * len(requests)
        self.commits += 1
        for result in results:
            if isinstance(result, IngestResult):
                self._unindexed += result.ingested
        return results

    def _index_some(self) -> None:
        """While idle: index events past the watermark (on this thread, nothing in flight)."""
        assert self._in_flight is None
        moved = self._index_transaction()
        assert self.conn is not None
        # Nothing moved (or it failed): wait for new events before trying again.
        self._unindexed = event_index.unindexed(self.conn) if moved else 0

    def _expire_some(self, busy: bool) -> None:
        """One bounded retention step when one is due: on the SQL thread after a commit
        (``busy``: within its share of the time), or on this one when idle. A failed step
        (a full disk...) waits for the next check."""
        if not self.retention.due(busy):
            return
        assert self.conn is not None
        try:
            self.retention.step(self.conn, self._lock_fd)
        except sqlite3.Error as exc:
            self.retention.pending = False
            logs.log(logging.WARNING, "retention step failed", error=str(exc))

    def _index_transaction(self) -> int:
        conn = self.conn
        assert conn is not None
        try:
            with write_transaction(conn, self._lock_fd):
                return event_index.index_events(conn)
        except sqlite3.Error:
            return 0


class InFlight(NamedTuple):
    """A batch whose plans execute on the SQL thread, and what its answers need."""

    future: Future[tuple[list[IngestResult], int]]
    accepted: list[tuple[Peer, int]]
    requests: list[IngestRequest]
    batch: list[tuple[list[int], WritePlan]]
    now_ms: int


def _request_id(payload: bytes) -> int:
    """The id of a request that does not decode, to fail it rather than leave it waiting."""
    try:
        head = msgspec.msgpack.decode(payload)
        return int(head[0])
    except Exception:
        return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3, 4) or not all(a.isdigit() for a in args[2:]):
        print(
            "usage: python -m flagstaff.store.sqlite.ingestd DB_PATH SOCKET_PATH "
            "[MMAP_MB [PERSON_CACHE_MB]]",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logs.configure(os.environ.get("FLAGSTAFF_LOG_LEVEL", "info"))
    db_path, socket_path = Path(args[0]), Path(args[1])
    mmap_mb = int(args[2]) if len(args) >= 3 else DEFAULT_MMAP_MB
    person_cache_mb = int(args[3]) if len(args) == 4 else DEFAULT_PERSON_CACHE_MB
    tune_allocator()  # freed bursts (large frames, a cache started over) go back to the system
    lock = lock_data_dir(db_path)
    try:
        IngestServer(db_path, socket_path, mmap_mb, person_cache_mb).serve()
    finally:
        os.close(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
