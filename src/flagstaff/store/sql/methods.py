"""Every management feature both stores share, as one mixin (and part of the Store protocol)."""

from __future__ import annotations

from typing import Protocol

from flagstaff.store.sql.accounts import Accounts
from flagstaff.store.sql.approvals import ApprovalMethods
from flagstaff.store.sql.definitions import DefinitionReads
from flagstaff.store.sql.experiments import ExperimentMethods
from flagstaff.store.sql.flags import FlagMethods
from flagstaff.store.sql.projects import ProjectMethods
from flagstaff.store.sql.sso import SsoMethods
from flagstaff.store.sql.surveys import SurveyMethods
from flagstaff.store.sql.webhooks import WebhookMethods


class ManagementMethods(
    ProjectMethods,
    DefinitionReads,
    FlagMethods,
    Accounts,
    SsoMethods,
    SurveyMethods,
    ExperimentMethods,
    ApprovalMethods,
    WebhookMethods,
    Protocol,
):
    """Projects, definitions as the flag caches read them, flags and cohorts, accounts and the
    activity log, surveys and early access, experiment definitions, approvals and webhooks,
    over the store's ``sql`` (:class:`~flagstaff.store.sql.db.Db`)."""

    async def ping(self) -> bool:
        """Whether the store's database answers now (``/_ready``)."""
        return await self.sql.ping()
