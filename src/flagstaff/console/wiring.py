"""The console's routes for the running app: its pages over the store, with the settings."""

from __future__ import annotations

from starlette.routing import BaseRoute

from flagstaff.accounts.store import AccountStore
from flagstaff.console.approvals import StoreApprovalData, approval_routes
from flagstaff.console.early_access import StoreEarlyAccessData, early_access_routes
from flagstaff.console.experiments import StoreExperimentData, experiment_routes
from flagstaff.console.favicon import favicon_routes
from flagstaff.console.routes import ConsoleSettings, console_routes
from flagstaff.console.sso import sso_routes
from flagstaff.console.store_data import StoreConsoleData
from flagstaff.console.surveys import StoreSurveyData, survey_routes
from flagstaff.console.team_data import StoreTeamData
from flagstaff.console.team_pages import team_routes
from flagstaff.console.webhooks import StoreWebhookData, webhook_routes
from flagstaff.server.config import Settings
from flagstaff.server.oidc import ProviderClient
from flagstaff.store.base import Store


def console_for(settings: Settings, store: Store) -> list[BaseRoute]:
    accounts: AccountStore = store
    team = StoreTeamData(store, settings.flag_quota_per_minute, settings.event_quota_per_minute)
    data = StoreConsoleData(store)
    sso = settings.sso_config()
    extra_sso = []
    if sso is not None:
        provider = ProviderClient(sso)
        extra_sso.append(lambda pages: sso_routes(pages, sso, provider))
    return console_routes(
        accounts,
        data,
        ConsoleSettings(
            trust_forwarded=settings.trust_forwarded_proto,
            sso_name=sso.name if sso else None,
            password_login_off=bool(sso and sso.only),
        ),
        extra=[
            *extra_sso,
            lambda pages: team_routes(pages, team),
            lambda pages: approval_routes(pages, StoreApprovalData(store)),
            lambda pages: webhook_routes(pages, StoreWebhookData(store)),
            lambda pages: experiment_routes(pages, StoreExperimentData(store, data)),
            lambda pages: survey_routes(pages, StoreSurveyData(store, data.property_keys)),
            lambda pages: early_access_routes(pages, StoreEarlyAccessData(store, data)),
            lambda _pages: favicon_routes(),
        ],
    )
