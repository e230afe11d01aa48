"""A flag's history, read once (``application/flags.flag_history``): the API's activity page
and the console's history page show the same records."""

from __future__ import annotations

from typing import Any

from flagstaff.activity.records import Actor, ChangeSource
from flagstaff.application.activity import flag_history
from flagstaff.application.flags import flag_from_input
from flagstaff.console.store_data import StoreConsoleData
from tests.unit.test_store_contract import TOKEN, Factory, backend, run

__all__ = ["backend"]

SOURCE = ChangeSource(actor=Actor(user_id=None, email="ci@example.com"))


def test_the_console_and_the_api_read_one_history(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        flag = await store.create_flag(pid, flag_from_input({"key": "f"}), SOURCE)
        other = await store.create_flag(pid, flag_from_input({"key": "g"}), SOURCE)
        flag = await store.update_flag(
            pid, flag.id, flag_from_input({"active": False}, flag), flag.version, SOURCE
        )
        rows = await flag_history(store, pid, flag.id, 10)
        assert [r.record.item_id for r in rows] == [str(flag.id)] * 2  # newest first, one flag's
        assert [r.id for r in await flag_history(store, pid, flag.id, 10, 1)] == [rows[1].id]
        console = await StoreConsoleData(store).flag_activity(pid, flag.id)
        assert [r.id for r in console] == [r.id for r in rows]
        assert len(await flag_history(store, pid, other.id, 10)) == 1

    run(backend, body)
