"""Who asks a use case, and where: the store, the accounts, the project, the principal."""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from flagstaff.accounts.roles import Principal
from flagstaff.accounts.store import AccountStore
from flagstaff.activity.records import Actor, ChangeSource

S = TypeVar("S", covariant=True)
"""What a use case needs of the store: a narrow protocol of its application module."""


class Caller(msgspec.Struct, Generic[S], frozen=True):
    """A use case's caller: the principal acting in ``project_id`` (authorised by the adapter
    that built it), and the stores it works through.

    A use case names the store it needs as ``Caller[XStore]``, ``XStore`` a protocol listing
    only the methods it calls; the adapters build ``Caller[Store]``, which satisfies each."""

    store: S
    accounts: AccountStore
    project_id: int
    principal: Principal

    @property
    def source(self) -> ChangeSource:
        """The principal as the author of a change, for the activity log."""
        return ChangeSource(actor=Actor(user_id=self.principal.user_id, email=self.principal.email))
