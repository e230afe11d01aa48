"""Which consumer process reads which shard: TTL'd leases in a JetStream key-value bucket.

Every entry of the bucket expires ``lease_seconds`` after its last write. A process keeps
``member.<id>`` alive and holds ``shard.<n>`` leases, renewing each by revision (compare and
set), so a renewal fails once the lease expired and another process took it. Each process
aims at ``ceil(shards / members)`` shards: it claims free ones up to that and gives back
the extra ones when more members appear. A process that dies stops renewing, and its
shards are free again after at most ``lease_seconds``.
"""

from __future__ import annotations

import contextlib
import math

import msgspec
from nats.js import errors as js_errors
from nats.js.kv import KeyValue


class Lease(msgspec.Struct):
    shard: int
    revision: int


def target_share(shards: int, members: int) -> int:
    """Shards one of ``members`` processes should hold."""
    return math.ceil(shards / max(1, members))


class Leases:
    def __init__(self, kv: KeyValue, member: str, shards: int) -> None:
        self.kv = kv
        self.member = member
        self.shards = shards
        self._member_revision = 0

    async def heartbeat(self) -> tuple[int, set[int]]:
        """Refresh this member's entry; the live members and the shards anyone holds."""
        self._member_revision = await self.kv.put(f"member.{self.member}", b"")
        try:
            keys = await self.kv.keys()
        except js_errors.NoKeysError:
            keys = []
        members = sum(1 for k in keys if k.startswith("member."))
        held = {int(k.split(".", 1)[1]) for k in keys if k.startswith("shard.")}
        return max(1, members), held

    async def claim(self, shard: int) -> Lease | None:
        try:
            revision = await self.kv.create(f"shard.{shard}", self.member.encode())
        except (js_errors.KeyWrongLastSequenceError, js_errors.KeyValueError):
            return None
        return Lease(shard, revision)

    async def renew(self, lease: Lease) -> bool:
        """Extend ``lease``; False once someone else holds the shard.

        A lease that expired while this process was busy (a long transaction holds the event
        loop) and that nobody took meanwhile is created again: no other process read the
        shard, so its reader goes on as it was.
        """
        key = f"shard.{lease.shard}"
        try:
            lease.revision = await self.kv.update(key, self.member.encode(), last=lease.revision)
            return True
        except (js_errors.KeyWrongLastSequenceError, js_errors.KeyValueError):
            pass
        try:
            lease.revision = await self.kv.create(key, self.member.encode())
        except (js_errors.KeyWrongLastSequenceError, js_errors.KeyValueError):
            return False
        return True

    async def release(self, lease: Lease) -> None:
        with contextlib.suppress(js_errors.KeyWrongLastSequenceError, js_errors.KeyValueError):
            await self.kv.delete(f"shard.{lease.shard}", last=lease.revision)

    async def leave(self) -> None:
        with contextlib.suppress(js_errors.KeyValueError):
            await self.kv.delete(f"member.{self.member}")
