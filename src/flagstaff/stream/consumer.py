"""``flagstaff consume``: read the stream's shards in order and apply them to PostgreSQL.

One :class:`ShardReader` task per shard this process holds a lease on (:mod:`.leases`). On
claiming a shard it recreates the shard's durable pull consumer to start right after the
last acknowledged message (its ack floor), so messages a dead owner read but never
acknowledged come again first, in order, instead of after newer ones.

Each reader runs two loops, so that the delay from capture's acknowledgement to the commit
is one transaction's time when the consumer keeps up, and batches grow only with the lag:

- the fetcher keeps a pull open on the shard and puts what arrives into the reader's
  :class:`Inbox` (at most ``batch`` messages and a transaction's worth of events ahead).
  Once a message came, the stream says how many more wait (``num_pending`` of its
  metadata): those are fetched at once, the exact count, so no pull lingers to fill a batch;
  with none waiting it goes back to one open pull;
- the committer takes everything fetched so far (at most ``batch`` messages) and applies it in
  transactions of at most :data:`TXN_EVENTS` events
  (:func:`~flagstaff.stream.apply.apply_batches`). A lone message is committed alone, at
  once; what arrives meanwhile is already in memory when the transaction ends and goes into
  the next one, so under a lag transactions grow up to the batch, as throughput wants.

After each commit the last message of the transaction is acknowledged (the consumer
acknowledges everything up to it) in the background: the next transaction does not wait for
the stream's answer. A lost acknowledgement only means a redelivery, which stores nothing
twice (uuid check in :mod:`.apply`); a reader waits for its last one before recreating its
consumer or giving the shard up. While PostgreSQL is down the transaction is retried with
backoff; the messages wait in the stream meanwhile (capture keeps acknowledging).

A message PostgreSQL refuses (not a connection failure: a value it cannot take, a bug) is
isolated and moved to the dead-letter subject ``flagstaff.events.dead`` of the same stream
with the error in a header, instead of holding up its shard.

A delivery can be lost on its way (the NATS server the reader is connected to dies after the
consumer sent it). Acknowledging a later message would then acknowledge the lost one too
(``AckPolicy.ALL``), and it would never come again. So the fetcher checks each message's
delivery number (the consumer's own sequence, 1, 2, 3... on the consumer ``_subscribe``
makes): at a jump it hands on only the messages before it and stops, the committer commits and
acknowledges those, and the reader makes its consumer again from the acknowledged floor, below
the lost message. A lost last message, with nothing after it to show the jump, is found when
the shard is quiet: the consumer says it delivered more than the reader received
(:data:`GAP_CHECK_SECONDS`).

A reader whose lease could not be renewed for most of its duration stops before another
process may take the shard; should it still commit meanwhile, the events are stored once
(uuid check in :mod:`.apply`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid

import asyncpg
import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js import errors as js_errors
from nats.js.kv import KeyValue

from flagstaff.ops import logs
from flagstaff.store.postgres.store import PostgresStore
from flagstaff.stream import codec
from flagstaff.stream.apply import apply_batches
from flagstaff.stream.client import STREAM_NAME, StreamSpec
from flagstaff.stream.leases import Lease, Leases, target_share
from flagstaff.stream.shards import DEAD_LETTER_SUBJECT, subject

TXN_EVENTS = 2_000
"""Events one consumer transaction takes at most (a larger message goes alone): as the direct
path's group commit (``GROUP_EVENTS``). The rules run on the event loop, so a transaction
holds it for its rules' time; larger ones starved the lease renewals on a loaded machine."""
ACK_WAIT_SECONDS = 3600
"""Never reached by a live reader: a reader retries its batch in memory until it commits,
and a shard's next owner recreates the consumer instead of waiting for redelivery."""


ACK_SECONDS = 5.0
"""How long a reader waits for the stream to confirm an acknowledgement."""
STOP_SECONDS = 10.0
"""The longest a stopping process spends finishing transactions and returning leases."""
REFUSALS = 3
"""Tries of a batch PostgreSQL refuses (not a connection failure) before isolating it."""
GAP_CHECK_SECONDS = 5.0
"""How often a quiet reader asks its consumer whether it delivered more than arrived."""

_TRANSIENT = (
    OSError,  # TimeoutError included
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,  # shutdown, cannot connect now, query cancelled
    asyncpg.InsufficientResourcesError,
    asyncpg.TransactionRollbackError,  # still racing after apply_batches' retries
    asyncpg.ReadOnlySQLTransactionError,  # a failover in progress
)


def transient(exc: BaseException) -> bool:
    """Whether a failed commit is worth retrying as it is (PostgreSQL unreachable or busy),
    as opposed to PostgreSQL refusing this batch's data."""
    if isinstance(exc, ValueError):  # asyncpg's client-side DataError: a value it cannot encode
        return False
    return isinstance(exc, (*_TRANSIENT, asyncpg.InterfaceError))


def durable_name(shard: int) -> str:
    return f"shard-{shard}"


class ConsumerStats(msgspec.Struct):
    """What one consume process did; rendered by :func:`flagstaff.ops.metrics.render_consumer`."""

    events_ingested: int = 0
    events_duplicate: int = 0
    events_dropped: int = 0
    messages: int = 0
    transactions: int = 0
    transaction_retries: int = 0
    failed_commits: int = 0
    lag: int = -1
    """Messages of every shard not yet acknowledged; -1 until first measured."""
    shards: list[int] = msgspec.field(default_factory=list)
    queue_delay_seconds: float = 0.0
    """From capture's publish to this process's commit, for the last committed message."""
    dead_letters: int = 0
    """Messages set aside on the dead-letter subject (refused by PostgreSQL, undecodable)."""
    store_failing: bool = False
    """The last commit failed (PostgreSQL unreachable); cleared by the next one that works."""
    last_commit: float = 0.0
    """``time.monotonic()`` of the last commit."""


Fetched = tuple[Msg, codec.StreamBatch | str]
"""A message and what it holds, or why it does not decode."""


class Inbox:
    """Messages of one shard fetched ahead of the transactions, decoded, in stream order: at
    most ``limit`` messages and about :data:`TXN_EVENTS` events (one transaction's worth:
    more would only sit in memory, and 8 shards fetching thousands of messages each at once
    overran the client's socket until the server cut it). The fetcher puts, the committer
    takes all there is."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._msgs: list[Fetched] = []
        self._events = 0
        self._per_message = 1.0
        """Events per message lately: how many messages make a transaction's worth."""
        self._error: BaseException | None = None
        self._closed = False
        self._changed = asyncio.Condition()

    def _full(self) -> bool:
        return len(self._msgs) >= self.limit or self._events >= TXN_EVENTS

    async def room(self) -> int:
        """How many messages may be fetched now (waits until at least one may)."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._full() or self._closed)
            by_events = int((TXN_EVENTS - self._events) / self._per_message)
            return max(1, min(self.limit - len(self._msgs), by_events))

    async def put(self, msgs: list[Fetched]) -> None:
        events = _events(msgs)
        async with self._changed:
            self._msgs += msgs
            self._events += events
            self._per_message = 0.8 * self._per_message + 0.2 * max(1.0, events / len(msgs))
            self._changed.notify_all()

    async def fail(self, error: BaseException) -> None:
        """The fetcher stopped on ``error``: the next :meth:`take` raises it."""
        async with self._changed:
            self._error = error
            self._changed.notify_all()

    async def close(self) -> None:
        """Wake a waiting :meth:`take` with nothing (the reader is stopping)."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    async def take(self) -> list[Fetched]:
        """Every message fetched so far (at most ``limit``), once there is one; [] once
        closed."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._msgs or self._error or self._closed)
            if self._error is not None and not self._msgs:
                raise self._error
            if self._closed:
                return []
            msgs, self._msgs = self._msgs[: self.limit], self._msgs[self.limit :]
            self._events = _events(self._msgs)
            self._changed.notify_all()
            return msgs


def _events(msgs: list[Fetched]) -> int:
    """Events the messages hold (one for a message that does not decode)."""
    return sum(len(b.events) if not isinstance(b, str) else 1 for _, b in msgs)


def decoded(msg: Msg) -> Fetched:
    try:
        return msg, codec.decode(msg.data)
    except msgspec.DecodeError as exc:
        return msg, f"undecodable message: {exc}"


class DeliveryLost(Exception):
    """A delivery of the shard's consumer never reached the reader: its consumer is made again
    from the acknowledged floor, so the lost message comes again (see the module)."""


def delivery_number(msg: Msg) -> int | None:
    """The consumer's sequence of this delivery (None: not a JetStream message)."""
    try:
        return int(msg.metadata.sequence.consumer)
    except Exception:
        return None


def unbroken(msgs: list[Msg], received: int) -> int:
    """How many of ``msgs`` continue the deliveries after the ``received`` first ones, in order:
    all of them unless one was lost on the way."""
    for i, msg in enumerate(msgs):
        number = delivery_number(msg)
        if number is not None and number != received + i + 1:
            return i
    return len(msgs)


def pending_after(msg: Msg) -> int:
    """Messages of the shard that waited in the stream when ``msg`` was delivered."""
    try:
        return int(msg.metadata.num_pending or 0)
    except Exception:  # not a JetStream message: no count
        return 0


class ShardReader:
    def __init__(
        self, nc: Client, store: PostgresStore, spec: StreamSpec, lease: Lease, stats: ConsumerStats
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=5)
        self.store = store
        self.spec = spec
        self.lease = lease
        self.stats = stats
        self.renewed = time.monotonic()
        self.stopping = False
        self.task: asyncio.Task[None] | None = None
        self._sub: nats.js.JetStreamContext.PullSubscription | None = None
        self._inbox: Inbox | None = None
        self._to_ack: Msg | None = None
        self._acking: asyncio.Task[None] | None = None
        self._fetcher: asyncio.Task[None] | None = None
        self._start = 0
        """Where this reader last made its consumer start: a retry that finds the consumer gone
        (deleted, but the answer lost) starts there again, not at the shard's first message."""

    def halt_fetching(self) -> None:
        """Send no more pulls for the shard, now. The next owner deletes and makes the shard's
        consumer again; a pull of this reader reaching the new one would have a message
        delivered here that nobody commits or acknowledges (held by the consumer's
        acknowledgement wait, an hour)."""
        if self._fetcher is not None:
            self._fetcher.cancel()

    def cancel(self) -> None:
        """Stop at once (the lease may be gone): fetching first, then the task."""
        self.halt_fetching()
        if self.task is not None:
            self.task.cancel()

    async def stop(self) -> None:
        """Stop after the current transaction (messages fetched ahead are left unacknowledged:
        the shard's next owner reads them again)."""
        self.stopping = True
        self.halt_fetching()
        if self._inbox is not None:
            await self._inbox.close()

    async def _subscribe(self) -> nats.js.JetStreamContext.PullSubscription:
        shard = self.lease.shard
        name = durable_name(shard)
        start = self._start
        try:
            info = await self.js.consumer_info(STREAM_NAME, name)
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            # A consumer made at a start sequence reports a floor of 0 until its first ack.
            start = max((floor or 0) + 1, info.config.opt_start_seq or 0)
            self._start = start
            await self.js.delete_consumer(STREAM_NAME, name)
        except js_errors.NotFoundError:
            pass
        config = js_api.ConsumerConfig(
            durable_name=name,
            filter_subject=subject(shard),
            ack_policy=js_api.AckPolicy.ALL,
            ack_wait=ACK_WAIT_SECONDS,
            max_ack_pending=max(self.spec.batch, 1000),
            deliver_policy=(
                js_api.DeliverPolicy.BY_START_SEQUENCE if start > 1 else js_api.DeliverPolicy.ALL
            ),
            opt_start_seq=start if start > 1 else None,
        )
        await self.js.add_consumer(STREAM_NAME, config)
        return await self.js.pull_subscribe_bind(durable=name, stream=STREAM_NAME)

    async def run(self) -> None:
        try:
            await self._loop()
            await self._settle_acks()
        except asyncio.CancelledError:
            # Stopped from outside (the lease may be gone): an acknowledgement sent now could
            # reach the consumer the next owner is making, so none is.
            if self._acking is not None:
                self._acking.cancel()
            raise
        finally:
            if self._sub is not None:
                with contextlib.suppress(Exception):
                    await self._sub.unsubscribe()

    async def _loop(self) -> None:
        sub = None
        while not self.stopping:
            fetcher: asyncio.Task[None] | None = None
            try:
                if sub is None:
                    await self._settle_acks()  # none may reach the consumer made next
                    sub = self._sub = await self._subscribe()
                    logs.log(logging.INFO, "reading shard", shard=self.lease.shard)
                inbox = self._inbox = Inbox(self.spec.batch)
                if self.stopping:
                    break
                fetcher = self._fetcher = asyncio.create_task(self._fetch(sub, inbox))
                while not self.stopping:
                    msgs = await inbox.take()
                    if msgs:
                        await self._apply(msgs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS unreachable for a while: start again
                logs.log(
                    logging.WARNING, "shard reader failed", shard=self.lease.shard, error=repr(exc)
                )
                await asyncio.sleep(0.5)
                with contextlib.suppress(Exception):
                    if sub is not None:
                        await sub.unsubscribe()
                sub = None
            finally:
                if fetcher is not None:
                    fetcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await fetcher

    async def _fetch(self, sub: nats.js.JetStreamContext.PullSubscription, inbox: Inbox) -> None:
        """Fetch the shard's messages into ``inbox`` as they come, until cancelled.

        With nothing known to wait, one pull of one message stays open for
        ``spec.fetch_wait`` seconds (and is renewed): it returns as soon as a message is
        published. Once one came, its ``num_pending`` says how many more wait in the stream;
        exactly those are fetched (as many as ``inbox`` has room for: about a transaction's
        worth), which returns as soon as they arrived: no pull waits for a batch to fill.

        A delivery lost on the way stops it (:class:`DeliveryLost`) after the messages before
        it (see the module).
        """
        waiting = 0
        received = 0  # deliveries of the consumer _subscribe made, in order
        short: int | None = None  # the consumer's delivered count, ahead, at the last check
        checked = time.monotonic()
        try:
            while True:
                room = await inbox.room()
                try:
                    if waiting:
                        msgs = await sub.fetch(min(waiting, room), timeout=self.spec.fetch_wait)
                    else:
                        msgs = await sub.fetch(1, timeout=self.spec.fetch_wait)
                except TimeoutError:  # nothing within the wait (nats-py raises asyncio's)
                    msgs = []
                if not msgs:
                    waiting = 0
                    if time.monotonic() - checked >= GAP_CHECK_SECONDS:
                        checked = time.monotonic()
                        delivered = await self._delivered()
                        if delivered is None or delivered <= received:
                            short = None
                        elif delivered == short:  # twice the same: not one still on its way
                            raise DeliveryLost(f"{delivered - received} delivered, none arrived")
                        else:
                            short = delivered
                    continue
                short = None
                kept = unbroken(msgs, received)
                received += kept
                if kept:
                    await inbox.put([decoded(m) for m in msgs[:kept]])
                if kept < len(msgs):
                    raise DeliveryLost(f"delivery {received + 1} never arrived")
                waiting = pending_after(msgs[-1])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await inbox.fail(exc)

    async def _delivered(self) -> int | None:
        """How many deliveries the shard's consumer made (None: it cannot say now)."""
        try:
            info = await self.js.consumer_info(STREAM_NAME, durable_name(self.lease.shard))
        except Exception:  # the stream is unreachable: the fetch says so, not this check
            return None
        return int(info.delivered.consumer_seq) if info.delivered else None

    async def _apply(self, msgs: list[Fetched]) -> None:
        chunk: list[tuple[Msg, codec.StreamBatch]] = []
        size = 0
        for msg, batch in msgs:
            if isinstance(batch, str):
                if chunk:
                    await self._commit(chunk)
                    chunk, size = [], 0
                await self._dead_letter(msg, batch)
                continue
            if chunk and size + len(batch.events) > TXN_EVENTS:
                await self._commit(chunk)
                chunk, size = [], 0
            chunk.append((msg, batch))
            size += len(batch.events)
        if chunk:
            await self._commit(chunk)

    async def _commit(self, chunk: list[tuple[Msg, codec.StreamBatch]]) -> None:
        """Apply ``chunk`` until it commits, then acknowledge it.

        While PostgreSQL is unreachable the chunk is retried with backoff, for as long as it
        takes. A chunk refused for another reason :data:`REFUSALS` times in a row is applied
        message by message, and a message refused alone goes to the dead-letter subject, so
        one bad message cannot hold up its shard.
        """
        pause = 0.1
        refusals = 0
        while True:
            if self.stopping and not self.owns():
                raise asyncio.CancelledError  # the lease is gone: the next owner re-reads
            try:
                applied = await apply_batches(self.store, [b for _, b in chunk])
                break
            except Exception as exc:
                if transient(exc):
                    self.stats.failed_commits += 1
                    self.stats.store_failing = True
                    logs.log(logging.WARNING, "shard commit failed, retrying", error=repr(exc))
                    await asyncio.sleep(pause * random.uniform(0.5, 1.0))
                    pause = min(pause * 2, 2.0)
                    continue
                refusals += 1
                logs.log(logging.ERROR, "PostgreSQL refused a shard's batch", error=repr(exc))
                if refusals < REFUSALS:
                    await asyncio.sleep(0.1)
                    continue
                if len(chunk) > 1:
                    for item in chunk:
                        await self._commit([item])
                    return
                await self._dead_letter(chunk[0][0], repr(exc))
                return
        self._acknowledge(chunk[-1][0])
        stats = self.stats
        stats.events_ingested += applied.ingested
        stats.events_duplicate += applied.duplicates
        stats.events_dropped += applied.dropped
        stats.transaction_retries += applied.retries
        stats.transactions += 1
        stats.messages += len(chunk)
        stats.queue_delay_seconds = time.time() - chunk[-1][1].queued_ms / 1000
        stats.store_failing = False
        stats.last_commit = time.monotonic()

    def _acknowledge(self, msg: Msg) -> None:
        """Acknowledge ``msg`` and all before it, in the background; while one
        acknowledgement is on its way, the newest one to send waits (it covers the others)."""
        self._to_ack = msg
        if self._acking is None or self._acking.done():
            self._acking = asyncio.create_task(self._send_acks())

    async def _send_acks(self) -> None:
        while self._to_ack is not None:
            msg, self._to_ack = self._to_ack, None
            try:
                await msg.ack_sync(timeout=ACK_SECONDS)
            except Exception as exc:  # the stream redelivers it to the next reader: no harm
                logs.log(
                    logging.WARNING,
                    "acknowledgement not confirmed",
                    shard=self.lease.shard,
                    error=repr(exc),
                )

    async def _settle_acks(self) -> None:
        """Wait for the acknowledgements on their way (a bounded time)."""
        task = self._acking
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), ACK_SECONDS * 2)
        except TimeoutError:
            task.cancel()
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        """Keep ``msg`` on the dead-letter subject (same stream), then acknowledge it."""
        headers = {"Flagstaff-Error": reason[:1000], "Flagstaff-Shard": str(self.lease.shard)}
        await self.js.publish(DEAD_LETTER_SUBJECT, msg.data, headers=headers)
        await msg.ack_sync(timeout=5)
        self.stats.dead_letters += 1
        logs.log(
            logging.ERROR,
            "a stream message went to the dead-letter subject",
            shard=self.lease.shard,
            subject=DEAD_LETTER_SUBJECT,
            reason=reason[:1000],
        )

    def owns(self) -> bool:
        return time.monotonic() - self.renewed < self.spec.lease_seconds * 0.75


class Consumers:
    """The shard readers of one process and the loop that keeps their leases."""

    def __init__(self, nc: Client, kv: KeyValue, store: PostgresStore, spec: StreamSpec) -> None:
        self.nc = nc
        self.store = store
        self.spec = spec
        self.member = uuid.uuid4().hex[:12]
        self.leases = Leases(kv, self.member, spec.shards)
        self.readers: dict[int, ShardReader] = {}
        self._fenced: dict[int, asyncio.Task[None]] = {}
        """Readers cancelled by the fence and maybe still unwinding, by shard: a new reader of
        the shard starts only once its predecessor is gone (see :meth:`_start`)."""
        self.stats = ConsumerStats()
        self.js = nc.jetstream(timeout=5)
        self._lag: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Lease rounds until ``stop``; then finish the shards' current transactions and give
        the leases back (within :data:`STOP_SECONDS`: with the stream unreachable, the
        leases simply expire)."""
        interval = self.spec.lease_seconds / 3
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                tick = asyncio.ensure_future(self._tick())
                await asyncio.wait([tick, stopping], return_when=asyncio.FIRST_COMPLETED)
                if not tick.done():
                    tick.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await tick
                if tick.cancelled():
                    break
                if tick.exception() is not None:
                    logs.log(logging.WARNING, "lease round failed", error=repr(tick.exception()))
                self._fence()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
        finally:
            stopping.cancel()
        try:
            await asyncio.wait_for(self._leave(), STOP_SECONDS)
        except TimeoutError:
            for reader in self.readers.values():
                if reader.task is not None:
                    reader.task.cancel()

    async def _leave(self) -> None:
        if self._lag is not None:
            self._lag.cancel()
        await asyncio.gather(*(self._release(shard) for shard in list(self.readers)))
        with contextlib.suppress(Exception):
            await self.leases.leave()

    async def _tick(self) -> None:
        readers = list(self.readers.items())
        # at once: one after another, eight round trips to a busy cluster outlasted the fence
        renewed = await asyncio.gather(
            *(self.leases.renew(r.lease) for _, r in readers), return_exceptions=True
        )
        for (shard, reader), kept in zip(readers, renewed, strict=True):
            if kept is True:
                reader.renewed = time.monotonic()
            elif kept is False:
                logs.log(logging.WARNING, "lost the lease of a shard", shard=shard)
                await self._drop(shard)
        failed = [e for e in renewed if isinstance(e, BaseException)]
        if failed:
            raise failed[0]  # the round failed: the fence decides (renewed stays old)
        members, held = await self.leases.heartbeat()
        share = target_share(self.spec.shards, members)
        extra = sorted(self.readers)[share:]
        await asyncio.gather(*(self._release(shard) for shard in extra))
        if len(self.readers) < share:
            free = [n for n in range(self.spec.shards) if n not in held]
            random.shuffle(free)
            for shard in free:
                if len(self.readers) >= share:
                    break
                lease = await self.leases.claim(shard)
                if lease is not None:
                    await self._start(lease)
        self.stats.shards = sorted(self.readers)
        if self._lag is None or self._lag.done():
            # apart from the round: a slow cluster answering eight questions in turn delayed
            # the next renewal past the fence
            self._lag = asyncio.create_task(self._measure_lag())

    async def _start(self, lease: Lease) -> None:
        """Read a shard just claimed, once the fence's reader of it (if any) has finished.

        A cancelled reader unwinds at its next await; until then its fetcher may still send a
        pull for the shard's durable consumer, which the new reader is about to delete and
        make again. A pull that reached the new consumer would have a message delivered to a
        subscription about to close: delivered, never acknowledged, and held by the
        consumer's acknowledgement wait (an hour), so the shard would stop.
        """
        previous = self._fenced.pop(lease.shard, None)
        if previous is not None and not previous.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(previous), self.spec.lease_seconds / 2)
            if not previous.done():
                logs.log(logging.WARNING, "shard reader still stopping", shard=lease.shard)
                self._fenced[lease.shard] = previous
                await self.leases.release(lease)
                return
        reader = ShardReader(self.nc, self.store, self.spec, lease, self.stats)
        reader.task = asyncio.create_task(reader.run())
        self.readers[lease.shard] = reader

    def _fence(self) -> None:
        """Stop readers whose lease may have expired (renewals failing): another process
        may hold the shard by now."""
        for shard, reader in list(self.readers.items()):
            if not reader.owns() and reader.task is not None:
                logs.log(logging.WARNING, "shard lease not renewed in time", shard=shard)
                reader.cancel()
                self._fenced[shard] = reader.task
                del self.readers[shard]

    async def _drop(self, shard: int) -> None:
        reader = self.readers.pop(shard)
        if reader.task is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader.task

    async def _release(self, shard: int) -> None:
        """Finish the current transaction of the shard, then give its lease back."""
        reader = self.readers.pop(shard)
        await reader.stop()
        if reader.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(reader.task), self.spec.lease_seconds / 2)
            except TimeoutError:
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader.task
        await self.leases.release(reader.lease)

    async def _measure_lag(self) -> None:
        try:
            counts = await asyncio.gather(*(self._shard_lag(n) for n in range(self.spec.shards)))
        except Exception as exc:
            logs.log(logging.WARNING, "lag not measured", error=repr(exc))
            return
        self.stats.lag = sum(counts)

    async def _shard_lag(self, shard: int) -> int:
        try:
            info = await self.js.consumer_info(STREAM_NAME, durable_name(shard))
        except js_errors.NotFoundError:
            return await self._subject_count(shard)
        return (info.num_pending or 0) + (info.num_ack_pending or 0)

    async def _subject_count(self, shard: int) -> int:
        """Messages of a shard no consumer was ever made for (all of them wait)."""
        info = await self.js.stream_info(STREAM_NAME, subjects_filter=subject(shard))
        subjects = info.state.subjects or {}
        return int(subjects.get(subject(shard), 0))
