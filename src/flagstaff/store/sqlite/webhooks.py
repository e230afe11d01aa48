"""Webhooks and their deliveries on SQLite (a mixin of the store). Deliveries are enqueued by
``webhook_queue`` in each activity row's transaction; workers claim due ones with a lease."""

from __future__ import annotations

import secrets
import sqlite3
from typing import TYPE_CHECKING, Any

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.webhooks import Delivery, Webhook
from flagstaff.store.base import Conflict, Page
from flagstaff.store.rows import json_text
from flagstaff.store.sqlite.accounts import write_change
from flagstaff.store.webhook_rows import (
    DELIVERY_COLUMNS,
    WEBHOOK_COLUMNS,
    ClaimedDelivery,
    delivery_record,
    webhook_activity,
    webhook_record,
)

if TYPE_CHECKING:
    from flagstaff.store.sqlite.writer import Writer

_WRITABLE = ("url", "secret", "enabled", "scopes", "description")


def _webhook_in(conn: sqlite3.Connection, project_id: int, webhook_id: int) -> Webhook | None:
    row = conn.execute(
        f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = ? AND id = ?",
        (project_id, webhook_id),
    ).fetchone()
    return webhook_record(row) if row else None


def _column_value(name: str, value: Any) -> Any:
    if name == "scopes":
        return json_text(value)
    if name == "enabled":
        return int(bool(value))
    return value


class WebhookMethods:
    _writer: Writer

    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def create_webhook(self, webhook: Webhook, source: ChangeSource) -> Webhook:
        def write(conn: sqlite3.Connection) -> Webhook:
            cur = conn.execute(
                "INSERT INTO webhooks (project_id, url, secret, enabled, scopes, description, "
                "created_at_ms, created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    webhook.project_id, webhook.url, webhook.secret, int(webhook.enabled),
                    json_text(webhook.scopes), webhook.description, webhook.created_at_ms,
                    webhook.created_by,
                ),
            )  # fmt: skip
            made = _webhook_in(conn, webhook.project_id, int(cur.lastrowid or 0))
            assert made is not None
            write_change(
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

        return await self._writer.submit(write)

    async def list_webhooks(self, project_id: int) -> list[Webhook]:
        rows = self.db.execute(
            f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = ? ORDER BY id",
            (project_id,),
        ).fetchall()
        return [webhook_record(r) for r in rows]

    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None:
        return _webhook_in(self.db, project_id, webhook_id)

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

        def write(conn: sqlite3.Connection) -> Webhook | None:
            before = _webhook_in(conn, project_id, webhook_id)
            if before is None:
                return None
            if names:
                conn.execute(
                    f"UPDATE webhooks SET {', '.join(f'{n} = ?' for n in names)} WHERE id = ?",
                    [*(_column_value(n, changes[n]) for n in names), webhook_id],
                )
            after = _webhook_in(conn, project_id, webhook_id)
            assert after is not None
            write_change(
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

        return await self._writer.submit(write)

    async def delete_webhook(
        self, project_id: int, webhook_id: int, source: ChangeSource, now_ms: int
    ) -> bool:
        """Delete the webhook and its deliveries."""

        def write(conn: sqlite3.Connection) -> bool:
            before = _webhook_in(conn, project_id, webhook_id)
            if before is None:
                return False
            conn.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", (webhook_id,))
            conn.execute("DELETE FROM webhooks WHERE id = ?", (webhook_id,))
            write_change(
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

        return await self._writer.submit(write)

    async def list_deliveries(
        self, project_id: int, webhook_id: int, limit: int, offset: int
    ) -> Page:
        """Newest first."""
        where = "project_id = ? AND webhook_id = ?"
        count = self.db.execute(
            f"SELECT COUNT(*) FROM webhook_deliveries WHERE {where}", (project_id, webhook_id)
        ).fetchone()[0]
        rows = self.db.execute(
            f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE {where} "
            "ORDER BY id DESC LIMIT ? OFFSET ?",
            (project_id, webhook_id, limit, offset),
        ).fetchall()
        return Page(int(count), [delivery_record(r) for r in rows])

    async def redeliver(
        self, project_id: int, webhook_id: int, delivery_id: int, now_ms: int
    ) -> Delivery | None:
        """Send the delivery again from now, with a fresh retry schedule; None when there is
        no such delivery; Conflict while a worker is sending it."""

        def write(conn: sqlite3.Connection) -> Delivery | None:
            row = conn.execute(
                "SELECT lease_until_ms FROM webhook_deliveries WHERE project_id = ? "
                "AND webhook_id = ? AND id = ?",
                (project_id, webhook_id, delivery_id),
            ).fetchone()
            if row is None:
                return None
            if row[0] is not None and row[0] > now_ms:
                raise Conflict("delivery", "the delivery is being sent now; try again shortly")
            conn.execute(
                "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, "
                "next_attempt_ms = ?, lease_until_ms = NULL, lease_token = NULL WHERE id = ?",
                (now_ms, delivery_id),
            )
            found = conn.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
            return delivery_record(found)

        return await self._writer.submit(write)

    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> list[ClaimedDelivery]:
        """Due deliveries of enabled webhooks, leased to the caller until ``now + lease_ms``
        (no other worker takes them meanwhile; an expired lease is taken again)."""
        due = (
            "d.status = 'pending' AND d.next_attempt_ms <= ? "
            "AND (d.lease_until_ms IS NULL OR d.lease_until_ms <= ?) AND w.enabled = 1"
        )
        pending = self.db.execute(  # a read first: an idle poll costs no write transaction
            f"SELECT 1 FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id "
            f"WHERE {due} LIMIT 1",
            (now_ms, now_ms),
        ).fetchone()
        if pending is None:
            return []
        token = secrets.token_hex(16)
        columns = ", ".join(f"d.{c.strip()}" for c in DELIVERY_COLUMNS.split(","))

        def write(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(
                f"SELECT {columns}, w.url, w.secret, d.body FROM webhook_deliveries d "
                f"JOIN webhooks w ON w.id = d.webhook_id WHERE {due} "
                "ORDER BY d.next_attempt_ms, d.id LIMIT ?",
                (now_ms, now_ms, limit),
            ).fetchall()
            conn.executemany(
                "UPDATE webhook_deliveries SET lease_until_ms = ?, lease_token = ? WHERE id = ?",
                [(now_ms + lease_ms, token, r[0]) for r in rows],
            )
            return rows

        n = len(DELIVERY_COLUMNS.split(","))
        return [
            ClaimedDelivery(delivery_record(r[:n]), r[n], r[n + 1], r[n + 2].encode(), token)
            for r in await self._writer.submit(write)
        ]

    async def finish_delivery(self, delivery: Delivery, lease_token: str) -> bool:
        """Record an attempt's outcome; False when the lease was lost (another worker, or a
        redelivery, took the row meanwhile: its outcome is then not recorded)."""

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_ms = ?, "
                "last_status_code = ?, last_error = ?, last_attempt_ms = ?, "
                "last_duration_ms = ?, lease_until_ms = NULL, lease_token = NULL "
                "WHERE id = ? AND lease_token = ?",
                (
                    delivery.status.value, delivery.attempts, delivery.next_attempt_ms,
                    delivery.last_status_code, delivery.last_error, delivery.last_attempt_ms,
                    delivery.last_duration_ms, delivery.id, lease_token,
                ),
            )  # fmt: skip
            return cur.rowcount > 0

        return await self._writer.submit(write)
