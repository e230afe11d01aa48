"""Who asks a use case, and where: the store, the accounts, the project, the principal."""

from __future__ import annotations

import msgspec

from flagstaff.accounts.roles import Principal
from flagstaff.accounts.store import AccountStore
from flagstaff.activity.records import Actor, ChangeSource
from flagstaff.store.base import Store


class Caller(msgspec.Struct):
    """A use case's caller: the principal acting in ``project_id`` (authorised by the adapter
    that built it), and the stores it works through."""

    store: Store
    accounts: AccountStore
    project_id: int
    principal: Principal

    @property
    def source(self) -> ChangeSource:
        """The principal as the author of a change, for the activity log."""
        return ChangeSource(actor=Actor(user_id=self.principal.user_id, email=self.principal.email))
