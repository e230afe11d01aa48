"""Reads of many experiments at once, for the console's list. A mixin of
:class:`~flagstaff.store.postgres.store.PostgresStore`."""

from __future__ import annotations

import asyncpg


class ExperimentReadsMixin:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def experiment_totals_rows(
        self, experiment_ids: list[int]
    ) -> dict[int, list[tuple[str, bytes]]]:
        out: dict[int, list[tuple[str, bytes]]] = {eid: [] for eid in experiment_ids}
        if not experiment_ids:
            return out
        rows = await self.pool.fetch(
            "SELECT experiment_id, fingerprint, totals FROM experiment_totals "
            "WHERE experiment_id = ANY($1::bigint[])",
            experiment_ids,
        )
        for eid, fingerprint, totals in rows:
            out[int(eid)].append((fingerprint, bytes(totals)))
        return out
