"""Single sign-on's rules (accounts/oidc.py), its settings (server/config.py) and the provider
client's key handling (server/oidc.py over an in-memory transport): tokens are made here with
joserfc, including the ones an attacker would send."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from flagstaff.accounts import oidc
from flagstaff.accounts.records import Role
from flagstaff.console.routes import safe_next
from flagstaff.server.config import ConfigError, Settings
from flagstaff.server.oidc import JWKS_REFETCH_S, ProviderClient

ISSUER = "https://idp.example.com/realms/acme"
CLIENT = "flagstaff"
NONCE = "the-nonce-of-this-sign-in"
NOW = 1_800_000_000
KEY = RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256", "use": "sig"})
OTHER = RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256", "use": "sig"})


def public(*keys: RSAKey) -> KeySet:
    return KeySet([RSAKey.import_key(k.as_dict(private=False)) for k in keys])


def claims(**overrides: Any) -> dict[str, Any]:
    base = {
        "iss": ISSUER,
        "sub": "user-1",
        "aud": CLIENT,
        "exp": NOW + 300,
        "iat": NOW,
        "nonce": NONCE,
        "email": "Ann@Example.com",
        "email_verified": True,
        "groups": ["flag-editors"],
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def token(key: RSAKey = KEY, kid: str = "k1", alg: str = "RS256", **overrides: Any) -> str:
    return jwt.encode({"alg": alg, "kid": kid}, claims(**overrides), key, algorithms=[alg])


def verify(value: str, keys: KeySet | None = None, algorithms: list[str] | None = None) -> Any:
    return oidc.verify_id_token(
        value,
        keys or public(KEY),
        issuer=ISSUER,
        client_id=CLIENT,
        nonce=NONCE,
        algorithms=["RS256"] if algorithms is None else algorithms,
        now_s=NOW,
    )


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def unsigned(header: dict[str, Any], signer: Any = None) -> str:
    signing_input = _b64(json.dumps(header).encode()) + b"." + _b64(json.dumps(claims()).encode())
    signature = signer(signing_input) if signer else b""
    return (signing_input + b"." + _b64(signature)).decode()


# the role map -------------------------------------------------------------------------------


def test_role_map_gives_the_highest_role_of_the_groups_else_the_wildcard() -> None:
    roles = oidc.parse_role_map("flag-admins=admin, flag-editors=editor,*=viewer")
    assert oidc.role_for(roles, ["flag-editors"]) is Role.EDITOR
    assert oidc.role_for(roles, ["flag-editors", "flag-admins"]) is Role.ADMIN
    assert oidc.role_for(roles, ["sales"]) is Role.VIEWER
    assert oidc.role_for(roles, []) is Role.VIEWER


def test_without_a_wildcard_a_person_in_no_listed_group_is_refused() -> None:
    roles = oidc.parse_role_map("flag-admins=admin")
    assert oidc.role_for(roles, ["sales"]) is None
    assert oidc.role_for(roles, ["flag-admins"]) is Role.ADMIN


@pytest.mark.parametrize("text", ["", "admins", "admins=owner", "=admin", " , "])
def test_a_bad_role_map_is_refused_with_the_reason(text: str) -> None:
    with pytest.raises(ValueError):
        oidc.parse_role_map(text)


def test_group_names_may_hold_equals_signs_and_slashes() -> None:
    roles = oidc.parse_role_map("/acme/flag=ops=admin")
    assert oidc.role_for(roles, ["/acme/flag=ops"]) is Role.ADMIN


def test_lower_rights() -> None:
    assert oidc.is_lower(Role.EDITOR, Role.ADMIN)
    assert oidc.is_lower(None, Role.VIEWER)
    assert not oidc.is_lower(Role.ADMIN, Role.EDITOR)
    assert not oidc.is_lower(Role.VIEWER, None)


# domains, identity, sessions ----------------------------------------------------------------


def test_allowed_domains_need_a_verified_email_of_one_of_them() -> None:
    allowed = oidc.parse_domains("example.com, @Acme.io")
    verified = oidc.identity_from(claims(), "groups")
    assert verified.email == "ann@example.com"
    assert oidc.domain_problem(verified, allowed) is None
    unverified = oidc.identity_from(claims(email_verified=False), "groups")
    assert "verified" in (oidc.domain_problem(unverified, allowed) or "")
    elsewhere = oidc.identity_from(claims(email="eve@evil.example"), "groups")
    assert "evil.example" in (oidc.domain_problem(elsewhere, allowed) or "")
    assert oidc.domain_problem(unverified, frozenset()) is None


def test_groups_claim_may_be_named_and_may_be_a_single_string() -> None:
    assert oidc.identity_from(claims(roles="ops"), "roles").groups == ("ops",)
    assert oidc.identity_from(claims(), "missing").groups == ()


def test_a_session_ends_with_the_id_token_at_most_the_configured_hours() -> None:
    identity = oidc.identity_from(claims(exp=NOW + 3600), "groups")
    now_ms = NOW * 1000
    assert oidc.session_end_ms(identity, now_ms, 12) == (NOW + 3600) * 1000
    assert oidc.session_end_ms(identity, now_ms, 0.5) == now_ms + 1_800_000


def test_pkce_s256_challenge_is_rfc7636s() -> None:
    # RFC 7636, appendix B
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert oidc.s256_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


# ID tokens ----------------------------------------------------------------------------------


def test_a_good_token_is_accepted() -> None:
    assert verify(token())["sub"] == "user-1"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": NOW - 120}, "expired"),
        ({"aud": "another-client"}, "aud"),
        ({"iss": "https://evil.example"}, "iss"),
        ({"nonce": "another"}, "nonce"),
        ({"nonce": None}, "nonce"),
        ({"iat": NOW + 3600}, "iat"),
        ({"iat": None}, "iat"),
        ({"sub": None}, "sub"),
        ({"aud": [CLIENT, "other"]}, "azp"),
        ({"aud": [CLIENT, "other"], "azp": "other"}, "azp"),
        ({"azp": "other"}, "azp"),
    ],
)
def test_claims_that_do_not_hold_are_refused(overrides: dict[str, Any], reason: str) -> None:
    with pytest.raises(oidc.IdTokenError, match=reason):
        verify(token(**overrides))


def test_small_clock_skew_is_allowed() -> None:
    assert verify(token(exp=NOW - 30, iat=NOW + 30))
    assert verify(token(aud=[CLIENT, "other"], azp=CLIENT))


def test_a_token_signed_by_another_key_with_the_same_kid_is_refused() -> None:
    with pytest.raises(oidc.IdTokenError, match="signature"):
        verify(token(key=OTHER))


def test_a_token_naming_an_unpublished_key_is_an_unknown_key() -> None:
    with pytest.raises(oidc.UnknownKey):
        verify(token(key=OTHER, kid="k2"))


def test_alg_none_is_refused_even_if_offered() -> None:
    forged = unsigned({"alg": "none", "kid": "k1"})
    with pytest.raises(oidc.IdTokenError):
        verify(forged, algorithms=oidc.accepted_algorithms(["RS256", "none"]))
    assert "none" not in oidc.accepted_algorithms(["none", "HS256", "RS256"])


def test_hmac_keyed_with_the_public_key_is_refused() -> None:
    pem = KEY.as_pem(private=False)
    forged = unsigned(
        {"alg": "HS256", "kid": "k1"}, lambda data: hmac.new(pem, data, hashlib.sha256).digest()
    )
    with pytest.raises(oidc.IdTokenError):
        verify(forged, algorithms=oidc.accepted_algorithms(["RS256", "HS256"]))
    assert oidc.accepted_algorithms(["HS256"]) == []


def test_an_algorithm_the_provider_does_not_advertise_is_refused() -> None:
    any_alg = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    signed = token(key=any_alg, alg="RS384")
    assert verify(signed, public(any_alg), algorithms=["RS384"])
    with pytest.raises(oidc.IdTokenError, match="algorithm"):
        verify(signed, public(any_alg), algorithms=oidc.accepted_algorithms(["RS256"]))
    with pytest.raises(oidc.IdTokenError, match="no signing algorithm"):
        verify(token(), algorithms=[])


def test_garbage_is_refused() -> None:
    for value in ("", "a.b.c", "not a token", token() + "x"):
        with pytest.raises(oidc.IdTokenError):
            verify(value)


# the provider's keys: rotation and the refetch limit ----------------------------------------


class FakeIdp:
    def __init__(self, keys: list[RSAKey]) -> None:
        self.keys = keys
        self.jwks_fetches = 0
        self.up = True

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("refused", request=request)
        if request.url.path.endswith("/.well-known/openid-configuration"):
            return httpx.Response(
                200,
                json={
                    "issuer": ISSUER,
                    "authorization_endpoint": ISSUER + "/auth",
                    "token_endpoint": ISSUER + "/token",
                    "jwks_uri": ISSUER + "/jwks",
                    "id_token_signing_alg_values_supported": ["RS256"],
                },
            )
        if request.url.path.endswith("/jwks"):
            self.jwks_fetches += 1
            return httpx.Response(200, json=public(*self.keys).as_dict())
        return httpx.Response(404)


def provider(idp: FakeIdp, clock: list[float]) -> ProviderClient:
    config = oidc.SsoConfig(
        issuer=ISSUER,
        client_id=CLIENT,
        client_secret="s",
        public_url="https://flags.example.com",
        role_map=oidc.parse_role_map("*=viewer"),
    )
    return ProviderClient(config, httpx.MockTransport(idp.handle), clock=lambda: clock[0])


def test_a_rotated_key_is_fetched_and_unknown_kids_refetch_at_most_every_30s() -> None:
    rotated = RSAKey.generate_key(2048, parameters={"kid": "k2", "alg": "RS256"})
    idp = FakeIdp([KEY])
    clock = [0.0]
    client = provider(idp, clock)

    async def run() -> None:
        assert (await client.verify(token(), NONCE, NOW)).subject == "user-1"
        assert idp.jwks_fetches == 1
        clock[0] = JWKS_REFETCH_S + 1
        idp.keys = [KEY, rotated]
        assert await client.verify(token(key=rotated, kid="k2"), NONCE, NOW)
        assert idp.jwks_fetches == 2
        for _ in range(5):  # made-up kids do not reach the provider again so soon
            with pytest.raises(oidc.UnknownKey):
                await client.verify(token(key=OTHER, kid="k9"), NONCE, NOW)
        assert idp.jwks_fetches == 2
        clock[0] += JWKS_REFETCH_S + 1
        with pytest.raises(oidc.UnknownKey):
            await client.verify(token(key=OTHER, kid="k9"), NONCE, NOW)
        assert idp.jwks_fetches == 3

    asyncio.run(run())


def test_an_unreachable_provider_is_reported_as_such() -> None:
    idp = FakeIdp([KEY])
    idp.up = False
    client = provider(idp, [0.0])
    with pytest.raises(oidc.ProviderUnreachable, match="discovery"):
        asyncio.run(client.authorization_url("s", "n", "v"))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"issuer": "https://evil.example"}, "names issuer"),
        ({"token_endpoint": "http://idp.example.com/token"}, "token_endpoint is not an https"),
        ({"jwks_uri": "http://idp.example.com/jwks"}, "jwks_uri is not an https"),
        ({"code_challenge_methods_supported": ["plain"]}, "PKCE"),
    ],
)
def test_a_discovery_document_that_cannot_be_trusted_is_refused(
    change: dict[str, Any], reason: str
) -> None:
    idp = FakeIdp([KEY])
    original = idp.handle

    def changed(request: httpx.Request) -> httpx.Response:
        answer = original(request)
        if request.url.path.endswith("openid-configuration"):
            return httpx.Response(200, json={**answer.json(), **change})
        return answer

    idp.handle = changed  # type: ignore[method-assign]
    with pytest.raises(oidc.ProviderUnreachable, match=reason):
        asyncio.run(provider(idp, [0.0]).metadata())


def test_the_authorization_url_carries_pkce_s256_state_and_nonce() -> None:
    url = httpx.URL(asyncio.run(provider(FakeIdp([KEY]), [0.0]).authorization_url("st", "no", "v")))
    params = dict(url.params)
    assert params["code_challenge_method"] == "S256"
    assert params["code_challenge"] == oidc.s256_challenge("v")
    assert (params["state"], params["nonce"], params["response_type"]) == ("st", "no", "code")
    assert params["redirect_uri"] == "https://flags.example.com/login/oidc/callback"


# next, settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "https://evil.example/",
        "//evil.example",
        "/\\evil.example",
        "\\/evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "javascript:alert(1)",
        "http:evil.example",
        "evil.example",
        "",
        None,
    ],
)
def test_next_never_leaves_the_console(value: str | None) -> None:
    assert safe_next(value) == "/feature_flags"


def test_next_keeps_a_local_path_and_query() -> None:
    assert safe_next("/experiments?tab=running") == "/experiments?tab=running"


SSO_ENV = {
    "FLAGSTAFF_PUBLIC_URL": "https://flags.example.com/",
    "FLAGSTAFF_OIDC_ISSUER": ISSUER + "/",
    "FLAGSTAFF_OIDC_CLIENT_ID": CLIENT,
    "FLAGSTAFF_OIDC_CLIENT_SECRET": "secret",
    "FLAGSTAFF_OIDC_ROLE_MAP": "flag-admins=admin,*=viewer",
}


def test_settings_without_a_provider_have_no_single_sign_on() -> None:
    assert Settings.from_env({}).sso_config() is None


def test_settings_with_a_provider() -> None:
    config = Settings.from_env(
        {**SSO_ENV, "FLAGSTAFF_OIDC_ONLY": "true", "FLAGSTAFF_OIDC_SESSION_HOURS": "8"}
    ).sso_config()
    assert config is not None
    assert config.issuer == ISSUER
    assert config.redirect_uri == "https://flags.example.com/login/oidc/callback"
    assert config.only and config.session_hours == 8
    assert config.scopes == "openid email profile" and config.groups_claim == "groups"


def test_the_client_secret_may_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    env = {k: v for k, v in SSO_ENV.items() if k != "FLAGSTAFF_OIDC_CLIENT_SECRET"}
    config = Settings.from_env({**env, "FLAGSTAFF_OIDC_CLIENT_SECRET_FILE": str(secret)})
    assert config.sso_config().client_secret == "from-a-file"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"FLAGSTAFF_PUBLIC_URL": None}, "FLAGSTAFF_PUBLIC_URL"),
        ({"FLAGSTAFF_PUBLIC_URL": "https://flags.example.com/console"}, "FLAGSTAFF_PUBLIC_URL"),
        ({"FLAGSTAFF_OIDC_ISSUER": "http://idp.example.com"}, "FLAGSTAFF_OIDC_ISSUER"),
        ({"FLAGSTAFF_OIDC_CLIENT_ID": None}, "FLAGSTAFF_OIDC_CLIENT_ID"),
        ({"FLAGSTAFF_OIDC_CLIENT_SECRET": None}, "SECRET"),
        ({"FLAGSTAFF_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "not both"),
        ({"FLAGSTAFF_OIDC_ROLE_MAP": None}, "FLAGSTAFF_OIDC_ROLE_MAP"),
        ({"FLAGSTAFF_OIDC_ROLE_MAP": "admins=owner"}, "FLAGSTAFF_OIDC_ROLE_MAP"),
        ({"FLAGSTAFF_OIDC_SCOPES": "email profile"}, "openid"),
    ],
)
def test_bad_settings_name_what_is_wrong(change: dict[str, str | None], names: str) -> None:
    env = {**SSO_ENV, **change}
    with pytest.raises(ConfigError, match=names):
        Settings.from_env({k: v for k, v in env.items() if v is not None})


def test_http_issuer_is_allowed_on_loopback_only() -> None:
    env = {**SSO_ENV, "FLAGSTAFF_OIDC_ISSUER": "http://127.0.0.1:9000"}
    assert Settings.from_env(env).sso_config() is not None


def test_settings_reach_the_workers() -> None:
    settings = Settings.from_env(SSO_ENV)
    again = Settings.from_env(settings.to_env())
    assert again.sso_config() == settings.sso_config()
