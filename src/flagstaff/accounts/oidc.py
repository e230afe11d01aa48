"""Single sign-on with an OpenID Connect provider: the rules, without I/O.

The role map (groups to a role), the allowed email domains, PKCE, the checks of an ID token
(signature through joserfc against the provider's keys, then ``iss``, ``aud``, ``azp``,
``exp``, ``iat``, ``nonce``) and when an SSO session ends. Fetching the provider's metadata and
keys and exchanging the code is ``server/oidc.py``; the console's routes are
``console/sso.py``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from joserfc import errors as jose_errors
from joserfc import jwt
from joserfc.jwk import KeySet

from flagstaff.accounts.records import Role, User
from flagstaff.common.units import MINUTE_MS

WILDCARD = "*"
ROLE_RANK = {Role.VIEWER: 1, Role.EDITOR: 2, Role.ADMIN: 3}
# Signatures made with the provider's private key only: never "none", never HMAC (whose
# "secret" would be the public key anyone can read from the JWKS).
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
CLOCK_SKEW_S = 60
LOGIN_STATE_TTL_MS = 10 * MINUTE_MS
"""How long a sign-in started at /login/oidc may take to come back to the callback."""


class RoleMap(msgspec.Struct, frozen=True):
    """``flag-admins=admin,flag-editors=editor,*=viewer``: groups to roles; ``default`` is the
    role of ``*`` (anyone the provider authenticates), None to refuse people in no group."""

    groups: dict[str, Role]
    default: Role | None = None


def parse_role_map(text: str) -> RoleMap:
    """The role map of ``FLAGSTAFF_OIDC_ROLE_MAP``; ValueError naming what is wrong."""
    groups: dict[str, Role] = {}
    default: Role | None = None
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        group, sep, raw_role = item.rpartition("=")
        group, raw_role = group.strip(), raw_role.strip().lower()
        if not sep or not group:
            raise ValueError(f"{item!r} is not group=role")
        try:
            role = Role(raw_role)
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise ValueError(f"{item!r}: the role must be one of {roles}") from None
        if group == WILDCARD:
            default = role
        else:
            groups[group] = role
    if not groups and default is None:
        raise ValueError("it maps no group to a role")
    return RoleMap(groups, default)


def role_for(role_map: RoleMap, groups: Iterable[str]) -> Role | None:
    """The highest role any of ``groups`` maps to, else the role of ``*``, else None."""
    found = [role_map.groups[g] for g in groups if g in role_map.groups]
    if role_map.default is not None:
        found.append(role_map.default)
    return max(found, key=ROLE_RANK.__getitem__) if found else None


def is_lower(new: Role | None, old: Role | None) -> bool:
    """Whether going from ``old`` to ``new`` (None: no access) takes rights away."""
    return old is not None and (new is None or ROLE_RANK[new] < ROLE_RANK[old])


def parse_domains(text: str | None) -> frozenset[str]:
    return frozenset(d.strip().lower().lstrip("@") for d in (text or "").split(",") if d.strip())


class Identity(msgspec.Struct, frozen=True):
    """Who the provider says signed in, from a verified ID token."""

    issuer: str
    subject: str
    email: str
    email_verified: bool
    name: str
    groups: tuple[str, ...]
    expires_at_ms: int


def domain_problem(identity: Identity, allowed: frozenset[str]) -> str | None:
    """Why the person's email is not allowed, or None (no domains set: everyone is)."""
    if not allowed:
        return None
    if not identity.email_verified:
        return "the provider did not say the email address is verified"
    domain = identity.email.rpartition("@")[2]
    if domain not in allowed:
        return f"the email domain {domain or '(none)'} is not allowed"
    return None


def session_end_ms(identity: Identity, now_ms: int, max_hours: float) -> int:
    """An SSO session ends with its ID token, at most ``max_hours`` after sign-in."""
    return min(identity.expires_at_ms, now_ms + int(max_hours * 3_600_000))


# PKCE (RFC 7636) and the values bound to the browser -----------------------------------------


def new_secret() -> str:
    """A random value for ``state``, ``nonce`` or the PKCE verifier (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def s256_challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def hash_state(state: str) -> str:
    """The stored form of a sign-in's ``state``."""
    return hashlib.sha256(state.encode()).hexdigest()


def same_secret(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))


class PendingLogin(msgspec.Struct, frozen=True):
    """A sign-in sent to the provider and not come back yet (stored by the hash of its state)."""

    nonce: str
    code_verifier: str
    next_path: str
    expires_at_ms: int


class SsoSync(msgspec.Struct, frozen=True):
    """What a sign-in did to its user: the role before and after (None: no access)."""

    user: User
    project_id: int
    previous_role: Role | None
    role: Role | None
    created: bool


class ProviderUnreachable(Exception):
    """The provider did not answer, or not with what the spec says; the message says which."""


class CodeRefused(Exception):
    """The provider's token endpoint refused the code (used already, expired, not ours)."""


# ID tokens ------------------------------------------------------------------------------------


class IdTokenError(Exception):
    """The ID token cannot be trusted; the message says why (shown and logged)."""


class UnknownKey(IdTokenError):
    """The token names a key the provider's JWKS does not hold (perhaps rotated in)."""


def accepted_algorithms(advertised: Iterable[str] | None) -> list[str]:
    """The provider's ``id_token_signing_alg_values_supported`` we accept: asymmetric ones
    only. A provider that advertises none is held to RS256, the spec's default."""
    offered = list(advertised) if advertised else ["RS256"]
    return sorted(a for a in offered if a in ASYMMETRIC_ALGORITHMS)


def verify_id_token(
    token: str,
    keys: KeySet,
    *,
    issuer: str,
    client_id: str,
    nonce: str,
    algorithms: list[str],
    now_s: int,
    leeway_s: int = CLOCK_SKEW_S,
) -> dict[str, Any]:
    """The claims of ``token`` once its signature and claims hold, else :class:`IdTokenError`
    (:class:`UnknownKey` when its ``kid`` is not among ``keys``)."""
    if not algorithms:
        raise IdTokenError("the provider advertises no signing algorithm we accept")
    try:
        decoded = jwt.decode(token, keys, algorithms=algorithms)
    except jose_errors.InvalidKeyIdError:
        raise UnknownKey("the token is signed with a key the provider does not publish") from None
    except jose_errors.BadSignatureError:
        raise IdTokenError("the token's signature is not the provider's") from None
    except jose_errors.UnsupportedAlgorithmError:
        raise IdTokenError("the token's signing algorithm is not accepted") from None
    except (jose_errors.JoseError, ValueError) as exc:
        raise IdTokenError(f"the token cannot be read ({exc.__class__.__name__})") from None
    claims = dict(decoded.claims)
    registry = jwt.JWTClaimsRegistry(
        now=now_s,
        leeway=leeway_s,
        iss={"essential": True, "value": issuer},
        sub={"essential": True},
        aud={"essential": True, "value": client_id},
        exp={"essential": True},
        iat={"essential": True},
    )
    try:
        registry.validate(claims)
    except jose_errors.ExpiredTokenError:
        raise IdTokenError("the token has expired") from None
    except jose_errors.InvalidClaimError as exc:
        raise IdTokenError(f"the token's {exc.claim} claim is not right") from None
    except jose_errors.MissingClaimError as exc:
        raise IdTokenError(f"the token has no {exc.claim} claim") from None
    except jose_errors.JoseError as exc:
        raise IdTokenError(f"the token's claims do not hold ({exc.error})") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != client_id:
        raise IdTokenError("the token was issued to another client (azp)")
    iat = claims["iat"]
    if not isinstance(iat, int | float) or iat > now_s + leeway_s:
        raise IdTokenError("the token's iat claim is not right")
    if not same_secret(claims.get("nonce") if isinstance(claims.get("nonce"), str) else "", nonce):
        raise IdTokenError("the token's nonce is not this sign-in's")
    return claims


def identity_from(claims: Mapping[str, Any], groups_claim: str) -> Identity:
    """The person a verified token names. ``groups_claim`` may be a list or one string."""
    raw_groups = claims.get(groups_claim)
    if isinstance(raw_groups, str):
        groups: tuple[str, ...] = (raw_groups,)
    elif isinstance(raw_groups, list):
        groups = tuple(str(g) for g in raw_groups if isinstance(g, str | int))
    else:
        groups = ()
    email = claims.get("email")
    name = claims.get("name") or claims.get("preferred_username") or ""
    return Identity(
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        email=email.strip().lower() if isinstance(email, str) else "",
        email_verified=claims.get("email_verified") is True,
        name=str(name)[:200],
        groups=groups,
        expires_at_ms=int(claims["exp"]) * 1000,
    )


class SsoConfig(msgspec.Struct, frozen=True):
    """The settings of single sign-on, checked (``server/config.py`` builds it)."""

    issuer: str
    client_id: str
    client_secret: str
    public_url: str
    role_map: RoleMap
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    allowed_domains: frozenset[str] = frozenset()
    only: bool = False
    name: str = "single sign-on"
    session_hours: float = 12.0
    project_id: int | None = None
    """The project the role map gives roles in; None: the first project."""

    @property
    def redirect_uri(self) -> str:
        return self.public_url + CALLBACK_PATH


START_PATH = "/login/oidc"
CALLBACK_PATH = "/login/oidc/callback"
