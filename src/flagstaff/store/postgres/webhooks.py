"""Webhooks and their deliveries on PostgreSQL (a mixin of the store). Deliveries are enqueued
by ``webhook_queue`` in each activity row's transaction; nodes claim due ones with a lease
(``FOR UPDATE SKIP LOCKED``, so two nodes never take the same row)."""

from __future__ import annotations

import secrets
from typing import Any

import asyncpg

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.webhooks import Delivery, Webhook
from flagstaff.store.base import Conflict, Page
from flagstaff.store.postgres.accounts import write_change
from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.rows import json_text
from flagstaff.store.webhook_rows import (
    DELIVERY_COLUMNS,
    WEBHOOK_COLUMNS,
    ClaimedDelivery,
    delivery_record,
    webhook_activity,
    webhook_record,
)

_WRITABLE = ("url", "secret", "enabled", "scopes", "description")
_D_COLUMNS = ", ".join(f"d.{c.strip()}" for c in DELIVERY_COLUMNS.split(","))


async def _webhook_in(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, webhook_id: int, lock: str = ""
) -> Webhook | None:
    row = await conn.fetchrow(
        f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $1 AND id = $2 {lock}",
        project_id,
        webhook_id,
    )
    return webhook_record(row) if row else None


def _column_value(name: str, value: Any) -> Any:
    if name == "scopes":
        return json_text(value)
    if name == "enabled":
        return bool(value)
    return pg_text(value)


class WebhookMethods:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def create_webhook(self, webhook: Webhook, source: ChangeSource) -> Webhook:
        async with self.pool.acquire() as conn, conn.transaction():
            webhook_id = await conn.fetchval(
                "INSERT INTO webhooks (project_id, url, secret, enabled, scopes, description, "
                "created_at_ms, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                webhook.project_id,
                pg_text(webhook.url),
                webhook.secret,
                webhook.enabled,
                json_text(webhook.scopes),
                pg_text(webhook.description),
                webhook.created_at_ms,
                webhook.created_by,
            )
            made = await _webhook_in(conn, webhook.project_id, int(webhook_id))
            assert made is not None
            await write_change(
                conn,
                project_id=made.project_id,
                scope=Scope.WEBHOOK,
                item_id=made.id,
                source=source,
                before=None,
                after=webhook_activity(made),
                now_ms=made.created_at_ms,
            )
        return made

    async def list_webhooks(self, project_id: int) -> list[Webhook]:
        rows = await self.pool.fetch(
            f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $1 ORDER BY id",
            project_id,
        )
        return [webhook_record(r) for r in rows]

    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None:
        return await _webhook_in(self.pool, project_id, webhook_id)

    async def update_webhook(
        self,
        project_id: int,
        webhook_id: int,
        changes: dict[str, Any],
        source: ChangeSource,
        now_ms: int,
    ) -> Webhook | None:
        """Set the given fields (url, secret, enabled, scopes, description); None when the
        webhook does not exist."""
        names = [n for n in _WRITABLE if n in changes]
        async with self.pool.acquire() as conn, conn.transaction():
            before = await _webhook_in(conn, project_id, webhook_id, "FOR UPDATE")
            if before is None:
                return None
            if names:
                sets = ", ".join(f"{n} = ${i + 1}" for i, n in enumerate(names))
                await conn.execute(
                    f"UPDATE webhooks SET {sets} WHERE id = ${len(names) + 1}",
                    *(_column_value(n, changes[n]) for n in names),
                    webhook_id,
                )
            after = await _webhook_in(conn, project_id, webhook_id)
            assert after is not None
            await write_change(
                conn,
                project_id=project_id,
                scope=Scope.WEBHOOK,
                item_id=webhook_id,
                source=source,
                before=webhook_activity(before),
                after=webhook_activity(after, "secret" in changes),
                now_ms=now_ms,
            )
        return after

    async def delete_webhook(
        self, project_id: int, webhook_id: int, source: ChangeSource, now_ms: int
    ) -> bool:
        """Delete the webhook and its deliveries."""
        async with self.pool.acquire() as conn, conn.transaction():
            before = await _webhook_in(conn, project_id, webhook_id, "FOR UPDATE")
            if before is None:
                return False
            await conn.execute("DELETE FROM webhook_deliveries WHERE webhook_id = $1", webhook_id)
            await conn.execute("DELETE FROM webhooks WHERE id = $1", webhook_id)
            await write_change(
                conn,
                project_id=project_id,
                scope=Scope.WEBHOOK,
                item_id=webhook_id,
                source=source,
                before=webhook_activity(before),
                after=None,
                now_ms=now_ms,
            )
        return True

    async def list_deliveries(
        self, project_id: int, webhook_id: int, limit: int, offset: int
    ) -> Page:
        """Newest first."""
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM webhook_deliveries WHERE project_id = $1 AND webhook_id = $2",
                project_id,
                webhook_id,
            )
            rows = await conn.fetch(
                f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE project_id = $1 "
                "AND webhook_id = $2 ORDER BY id DESC LIMIT $3 OFFSET $4",
                project_id,
                webhook_id,
                limit,
                offset,
            )
        return Page(int(count), [delivery_record(r) for r in rows])

    async def redeliver(
        self, project_id: int, webhook_id: int, delivery_id: int, now_ms: int
    ) -> Delivery | None:
        """Send the delivery again from now, with a fresh retry schedule; None when there is
        no such delivery; Conflict while a node is sending it."""
        async with self.pool.acquire() as conn, conn.transaction():
            lease = await conn.fetchrow(
                "SELECT lease_until_ms FROM webhook_deliveries WHERE project_id = $1 "
                "AND webhook_id = $2 AND id = $3 FOR UPDATE",
                project_id,
                webhook_id,
                delivery_id,
            )
            if lease is None:
                return None
            if lease[0] is not None and lease[0] > now_ms:
                raise Conflict("delivery", "the delivery is being sent now; try again shortly")
            row = await conn.fetchrow(
                "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, "
                "next_attempt_ms = $1, lease_until_ms = NULL, lease_token = NULL WHERE id = $2 "
                f"RETURNING {DELIVERY_COLUMNS}",
                now_ms,
                delivery_id,
            )
        return delivery_record(row)

    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> list[ClaimedDelivery]:
        """Due deliveries of enabled webhooks, leased to the caller until ``now + lease_ms``
        (rows another node is claiming are skipped, not waited for)."""
        token = secrets.token_hex(16)
        rows = await self.pool.fetch(
            "WITH due AS (SELECT d.id FROM webhook_deliveries d JOIN webhooks w "
            "ON w.id = d.webhook_id WHERE d.status = 'pending' AND d.next_attempt_ms <= $1 "
            "AND (d.lease_until_ms IS NULL OR d.lease_until_ms <= $1) AND w.enabled "
            "ORDER BY d.next_attempt_ms, d.id LIMIT $2 FOR UPDATE OF d SKIP LOCKED) "
            "UPDATE webhook_deliveries d SET lease_until_ms = $3, lease_token = $4 "
            "FROM due, webhooks w WHERE d.id = due.id AND w.id = d.webhook_id "
            f"RETURNING {_D_COLUMNS}, w.url, w.secret, d.body",
            now_ms,
            limit,
            now_ms + lease_ms,
            token,
        )
        n = len(DELIVERY_COLUMNS.split(","))
        claimed = [
            ClaimedDelivery(delivery_record(r[:n]), r[n], r[n + 1], r[n + 2].encode(), token)
            for r in rows
        ]
        return sorted(claimed, key=lambda c: (c.delivery.next_attempt_ms or 0, c.delivery.id))

    async def finish_delivery(self, delivery: Delivery, lease_token: str) -> bool:
        """Record an attempt's outcome; False when the lease was lost (another node, or a
        redelivery, took the row meanwhile: its outcome is then not recorded)."""
        status = await self.pool.execute(
            "UPDATE webhook_deliveries SET status = $1, attempts = $2, next_attempt_ms = $3, "
            "last_status_code = $4, last_error = $5, last_attempt_ms = $6, "
            "last_duration_ms = $7, lease_until_ms = NULL, lease_token = NULL "
            "WHERE id = $8 AND lease_token = $9",
            delivery.status.value,
            delivery.attempts,
            delivery.next_attempt_ms,
            delivery.last_status_code,
            pg_text(delivery.last_error),
            delivery.last_attempt_ms,
            delivery.last_duration_ms,
            delivery.id,
            lease_token,
        )
        return status != "UPDATE 0"
