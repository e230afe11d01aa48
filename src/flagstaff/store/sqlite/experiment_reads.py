"""Reads of many experiments at once, for the console's list. A mixin of
:class:`~flagstaff.store.sqlite.store.SQLiteStore`."""

from __future__ import annotations

import sqlite3


class ExperimentReadsMixin:
    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def experiment_totals_rows(
        self, experiment_ids: list[int]
    ) -> dict[int, list[tuple[str, bytes]]]:
        out: dict[int, list[tuple[str, bytes]]] = {eid: [] for eid in experiment_ids}
        if not experiment_ids:
            return out
        marks = ", ".join("?" * len(experiment_ids))
        for eid, fingerprint, totals in self.db.execute(
            "SELECT experiment_id, fingerprint, totals FROM experiment_totals "
            f"WHERE experiment_id IN ({marks})",
            experiment_ids,
        ):
            out[eid].append((fingerprint, totals))
        return out
