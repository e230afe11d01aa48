"""Single sign-on's two steps over the :class:`AccountStore` and a :class:`Provider`: starting a
sign-in (state, nonce and PKCE verifier stored, the browser sent to the provider) and finishing
it at the callback (state taken once, code exchanged, ID token verified, the person's groups
turned into a role, a session made). Each refusal says why; none makes a session."""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

from flagstaff.accounts import oidc, sessions
from flagstaff.accounts.oidc import CodeRefused, Identity, IdTokenError, PendingLogin, SsoConfig
from flagstaff.accounts.records import User
from flagstaff.accounts.store import AccountStore
from flagstaff.common.errors import Conflict


class Provider(Protocol):
    """What the sign-in needs of the provider (``server/oidc.py`` over HTTP)."""

    async def authorization_url(self, state: str, nonce: str, code_verifier: str) -> str: ...

    async def exchange_code(self, code: str, code_verifier: str) -> str: ...

    async def verify(self, id_token: str, nonce: str, now_s: int) -> Identity: ...


class Refusal(enum.StrEnum):
    """Why a sign-in was refused: the page's title comes from it, the status too."""

    STATE = "state"  # no, another or an already used state: not this browser's sign-in
    PROVIDER_ERROR = "provider_error"  # the provider sent the person back with an error
    CODE = "code"  # the provider refused the code (used twice, expired)
    TOKEN = "token"  # the ID token does not hold (signature, issuer, audience, expiry, nonce)
    NOT_ALLOWED = "not_allowed"  # domain or groups not allowed
    UNREACHABLE = "unreachable"  # the provider did not answer
    ACCOUNT = "account"  # the email belongs to an account that cannot be linked


class SignedIn(msgspec.Struct, frozen=True):
    user: User
    session: sessions.NewSession
    next_path: str
    sync: oidc.SsoSync


class Refused(msgspec.Struct, frozen=True):
    refusal: Refusal
    reason: str
    user: User | None = None
    name: str = ""
    """Who was refused, when the provider said (the email, else the subject)."""


async def start(
    store: AccountStore, provider: Provider, next_path: str, now_ms: int
) -> tuple[str, str]:
    """A new sign-in: the provider's URL to send the browser to, and the state the browser's
    cookie must hold when it comes back. Raises what ``provider`` raises when unreachable."""
    state, nonce, verifier = oidc.new_secret(), oidc.new_secret(), oidc.new_secret()
    url = await provider.authorization_url(state, nonce, verifier)
    pending = PendingLogin(nonce, verifier, next_path, now_ms + oidc.LOGIN_STATE_TTL_MS)
    await store.create_oidc_login(oidc.hash_state(state), pending, now_ms)
    return url, state


async def take_state(
    store: AccountStore, state: str | None, cookie_state: str | None, now_ms: int
) -> PendingLogin | Refused:
    """The sign-in this callback finishes: the ``state`` of the URL must be the one this
    browser's cookie holds, and is used up here."""
    if not oidc.same_secret(state, cookie_state):
        return Refused(Refusal.STATE, "the state does not match this browser's sign-in")
    pending = await store.take_oidc_login(oidc.hash_state(str(state)), now_ms)
    if pending is None:
        return Refused(Refusal.STATE, "the sign-in expired or was already used")
    return pending


async def finish(
    store: AccountStore,
    provider: Provider,
    config: SsoConfig,
    pending: PendingLogin,
    code: str,
    ip: str,
    user_agent: str,
    now_ms: int,
    iss_param: str | None = None,
) -> SignedIn | Refused:
    """Exchange the code, verify the ID token, apply the person's role and start a session.
    ``iss_param`` is the callback's ``iss`` (RFC 9207), which must name our provider when
    sent. Provider errors other than a refused code propagate (the caller shows them as
    unreachable)."""
    if iss_param is not None and iss_param.rstrip("/") != config.issuer:
        return Refused(Refusal.TOKEN, "the answer comes from another issuer")
    try:
        id_token = await provider.exchange_code(code, pending.code_verifier)
        identity = await provider.verify(id_token, pending.nonce, now_ms // 1000)
    except CodeRefused as exc:
        return Refused(Refusal.CODE, str(exc))
    except IdTokenError as exc:
        return Refused(Refusal.TOKEN, str(exc))
    role = oidc.role_for(config.role_map, identity.groups)
    problem = oidc.domain_problem(identity, config.allowed_domains)
    if problem is None and role is None:
        problem = "none of the person's groups is given a role here"
    try:
        sync = await store.sync_sso_user(
            identity, role if problem is None else None, config.project_id, now_ms
        )
    except Conflict as exc:
        return Refused(Refusal.ACCOUNT, exc.message, None, identity.email or identity.subject)
    if problem is not None:
        return Refused(Refusal.NOT_ALLOWED, problem, sync.user, sync.user.email)
    end = oidc.session_end_ms(identity, now_ms, config.session_hours)
    if end <= now_ms:
        return Refused(Refusal.TOKEN, "the token has expired")
    new = sessions.start_session(now_ms)
    new = msgspec.structs.replace(new, expires_at_ms=end)
    await store.create_session(
        sync.user.id, new.token_hash, new.created_at_ms, end, ip, user_agent[:400]
    )
    return SignedIn(sync.user, new, pending.next_path, sync)


async def record_refusal(
    store: AccountStore, config: SsoConfig, refused: Refused, now_ms: int
) -> None:
    """Keep a refused sign-in that reached the provider in the activity log: who (when the
    provider said), the issuer, and why."""
    await store.record_sso_refusal(
        config.project_id,
        refused.user,
        refused.name,
        config.issuer,
        f"{refused.refusal.value}: {refused.reason}",
        now_ms,
    )
