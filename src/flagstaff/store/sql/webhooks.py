"""Webhooks and their deliveries (a mixin of both stores). Deliveries are enqueued in each
activity row's transaction (:func:`~flagstaff.store.sql.activity.enqueue_deliveries`); workers
and nodes claim due ones with a lease (PostgreSQL skips rows another node is claiming)."""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.webhooks import Delivery, Webhook
from flagstaff.store.records import Conflict, Page
from flagstaff.store.sql.activity import write_change
from flagstaff.store.sql.db import Db, Reader, Row, Tx, by_id, json_arg, page
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
_DUE = (
    "d.status = 'pending' AND d.next_attempt_ms <= $1 "
    "AND (d.lease_until_ms IS NULL OR d.lease_until_ms <= $1) AND w.enabled"
)


async def _webhook_in(
    db: Reader, project_id: int, webhook_id: int, lock: bool = False
) -> Webhook | None:
    row = await by_id(db, "webhooks", WEBHOOK_COLUMNS, project_id, webhook_id, lock)
    return webhook_record(row) if row else None


def _column_value(name: str, value: Any) -> Any:
    if name == "scopes":
        return json_arg(value)
    if name == "enabled":
        return bool(value)
    return value


class WebhookMethods(Protocol):
    sql: Db

    async def create_webhook(self, webhook: Webhook, source: ChangeSource) -> Webhook:
        async def write(tx: Tx) -> Webhook:
            webhook_id = await tx.fetchval(
                "INSERT INTO webhooks (project_id, url, secret, enabled, scopes, description, "
                "created_at_ms, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                webhook.project_id,
                webhook.url,
                webhook.secret,
                webhook.enabled,
                json_arg(webhook.scopes),
                webhook.description,
                webhook.created_at_ms,
                webhook.created_by,
            )
            made = await _webhook_in(tx, webhook.project_id, int(webhook_id))
            assert made is not None
            await write_change(
                tx, made.project_id, Scope.WEBHOOK, made.id, source, None, webhook_activity(made),
                made.created_at_ms,
            )  # fmt: skip
            return made

        return await self.sql.write(write)

    async def list_webhooks(self, project_id: int) -> list[Webhook]:
        rows = await self.sql.fetch(
            f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $1 ORDER BY id",
            project_id,
        )
        return [webhook_record(r) for r in rows]

    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None:
        return await _webhook_in(self.sql, project_id, webhook_id)

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

        async def write(tx: Tx) -> Webhook | None:
            before = await _webhook_in(tx, project_id, webhook_id, lock=True)
            if before is None:
                return None
            if names:
                sets = ", ".join(f"{n} = ${i + 1}" for i, n in enumerate(names))
                await tx.execute(
                    f"UPDATE webhooks SET {sets} WHERE id = ${len(names) + 1}",
                    *(_column_value(n, changes[n]) for n in names),
                    webhook_id,
                )
            after = await _webhook_in(tx, project_id, webhook_id)
            assert after is not None
            await write_change(
                tx, project_id, Scope.WEBHOOK, webhook_id, source, webhook_activity(before),
                webhook_activity(after, "secret" in changes), now_ms,
            )  # fmt: skip
            return after

        return await self.sql.write(write)

    async def delete_webhook(
        self, project_id: int, webhook_id: int, source: ChangeSource, now_ms: int
    ) -> bool:
        """Delete the webhook and its deliveries."""

        async def write(tx: Tx) -> bool:
            before = await _webhook_in(tx, project_id, webhook_id, lock=True)
            if before is None:
                return False
            await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = $1", webhook_id)
            await tx.execute("DELETE FROM webhooks WHERE id = $1", webhook_id)
            await write_change(
                tx, project_id, Scope.WEBHOOK, webhook_id, source, webhook_activity(before), None,
                now_ms,
            )  # fmt: skip
            return True

        return await self.sql.write(write)

    async def list_deliveries(
        self, project_id: int, webhook_id: int, limit: int, offset: int
    ) -> Page:
        """Newest first."""
        return await page(
            self.sql,
            "webhook_deliveries WHERE project_id = $1 AND webhook_id = $2",
            DELIVERY_COLUMNS,
            "id DESC",
            (project_id, webhook_id),
            limit,
            offset,
            delivery_record,
        )

    async def redeliver(
        self, project_id: int, webhook_id: int, delivery_id: int, now_ms: int
    ) -> Delivery | None:
        """Send the delivery again from now, with a fresh retry schedule; None when there is
        no such delivery; Conflict while a worker or node is sending it."""

        async def write(tx: Tx) -> Row | None:
            lease = await tx.fetchrow(
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
            return await tx.fetchrow(
                "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, "
                "next_attempt_ms = $1, lease_until_ms = NULL, lease_token = NULL WHERE id = $2 "
                f"RETURNING {DELIVERY_COLUMNS}",
                now_ms,
                delivery_id,
            )

        row = await self.sql.write(write)
        return delivery_record(row) if row is not None else None

    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> list[ClaimedDelivery]:
        """Due deliveries of enabled webhooks, leased to the caller until ``now + lease_ms``
        (no other worker takes them meanwhile; an expired lease is taken again)."""
        pending = await self.sql.fetchval(  # a read first: an idle poll costs no write
            f"SELECT 1 FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id "
            f"WHERE {_DUE} LIMIT 1",
            now_ms,
        )
        if pending is None:
            return []
        token = secrets.token_hex(16)

        async def claim(tx: Tx) -> list[Row]:
            rows = await tx.fetch(
                f"SELECT {_D_COLUMNS}, w.url, w.secret, d.body FROM webhook_deliveries d "
                f"JOIN webhooks w ON w.id = d.webhook_id WHERE {_DUE} "
                "ORDER BY d.next_attempt_ms, d.id LIMIT $2 FOR UPDATE OF d SKIP LOCKED",
                now_ms,
                limit,
            )
            await tx.executemany(
                "UPDATE webhook_deliveries SET lease_until_ms = $1, lease_token = $2 WHERE id = $3",
                [(now_ms + lease_ms, token, r[0]) for r in rows],
            )
            return rows

        n = len(DELIVERY_COLUMNS.split(","))
        return [
            ClaimedDelivery(delivery_record(r[:n]), r[n], r[n + 1], r[n + 2].encode(), token)
            for r in await self.sql.write(claim)
        ]

    async def finish_delivery(self, delivery: Delivery, lease_token: str) -> bool:
        """Record an attempt's outcome; False when the lease was lost (another worker or
        node, or a redelivery, took the row meanwhile: its outcome is then not recorded)."""
        changed = await self.sql.execute(
            "UPDATE webhook_deliveries SET status = $1, attempts = $2, next_attempt_ms = $3, "
            "last_status_code = $4, last_error = $5, last_attempt_ms = $6, "
            "last_duration_ms = $7, lease_until_ms = NULL, lease_token = NULL "
            "WHERE id = $8 AND lease_token = $9",
            delivery.status.value,
            delivery.attempts,
            delivery.next_attempt_ms,
            delivery.last_status_code,
            delivery.last_error,
            delivery.last_attempt_ms,
            delivery.last_duration_ms,
            delivery.id,
            lease_token,
        )
        return changed > 0
