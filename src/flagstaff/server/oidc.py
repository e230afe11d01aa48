"""The OpenID Connect provider as a worker talks to it (httpx, with timeouts): its metadata
from ``/.well-known/openid-configuration``, its signing keys (JWKS, fetched again for a key
it has not seen, at most every :data:`JWKS_REFETCH_S`), and the code exchanged for tokens.

The rules (what a valid ID token is) are ``accounts/oidc.py``.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus  # RFC 6749 2.3.1: id and secret form-encoded for Basic

import httpx
import msgspec
from joserfc.jwk import KeySet

from flagstaff.accounts import oidc
from flagstaff.accounts.oidc import (
    CodeRefused,
    Identity,
    IdTokenError,
    ProviderUnreachable,
    SsoConfig,
    UnknownKey,
)
from flagstaff.server.config import web_url

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
METADATA_TTL_S = 3600.0
JWKS_REFETCH_S = 30.0
"""The shortest time between two JWKS fetches for unknown key ids: a stream of tokens with
made-up ``kid``s cannot turn into a stream of requests to the provider."""
MAX_DOCUMENT_BYTES = 512 * 1024


class Metadata(msgspec.Struct, frozen=True):
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    id_token_signing_alg_values_supported: list[str] = []
    token_endpoint_auth_methods_supported: list[str] = []
    code_challenge_methods_supported: list[str] = []


class ProviderClient:
    """One worker's view of the provider; metadata and keys are kept between sign-ins."""

    def __init__(
        self,
        config: SsoConfig,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._transport = transport
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._metadata: Metadata | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None
        self._keys_at = 0.0

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=TIMEOUT, transport=self._transport, follow_redirects=False
            )
        return self._client

    async def _get_json(self, url: str, what: str) -> Any:
        try:
            answer = await self._http().get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ProviderUnreachable(f"{what} ({url}): {exc.__class__.__name__}") from None
        if answer.status_code != 200:
            raise ProviderUnreachable(f"{what} ({url}) answered {answer.status_code}")
        if len(answer.content) > MAX_DOCUMENT_BYTES:
            raise ProviderUnreachable(f"{what} ({url}) is too large")
        try:
            return answer.json()
        except ValueError:
            raise ProviderUnreachable(f"{what} ({url}) is not JSON") from None

    async def metadata(self) -> Metadata:
        now = self._clock()
        if self._metadata is not None and now - self._metadata_at < METADATA_TTL_S:
            return self._metadata
        url = self.config.issuer + "/.well-known/openid-configuration"
        raw = await self._get_json(url, "the provider's discovery document")
        try:
            found = msgspec.convert(raw, Metadata)
        except msgspec.ValidationError as exc:
            raise ProviderUnreachable(f"the discovery document is not usable: {exc}") from None
        if found.issuer.rstrip("/") != self.config.issuer:
            # A document naming another issuer would let that issuer's tokens in (mix-up).
            raise ProviderUnreachable(
                f"the discovery document names issuer {found.issuer!r}, not {self.config.issuer!r}"
            )
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not web_url(getattr(found, name), allow_path=True):
                raise ProviderUnreachable(
                    f"the discovery document's {name} is not an https URL: {getattr(found, name)!r}"
                )
        methods = found.code_challenge_methods_supported
        if methods and "S256" not in methods:
            raise ProviderUnreachable("the provider does not support PKCE with S256")
        self._metadata, self._metadata_at = found, now
        return found

    async def keys(self, refresh: bool = False) -> KeySet:
        """The provider's signing keys; ``refresh`` fetches them again unless that was done
        less than :data:`JWKS_REFETCH_S` ago."""
        now = self._clock()
        if self._keys is not None and not (refresh and now - self._keys_at >= JWKS_REFETCH_S):
            return self._keys
        meta = await self.metadata()
        raw = await self._get_json(meta.jwks_uri, "the provider's keys")
        try:
            keys = KeySet.import_key_set(raw)
        except Exception as exc:  # joserfc raises several kinds for a malformed set
            raise ProviderUnreachable(f"the provider's keys cannot be read: {exc}") from None
        self._keys, self._keys_at = keys, now
        return keys

    async def authorization_url(self, state: str, nonce: str, code_verifier: str) -> str:
        meta = await self.metadata()
        query = httpx.QueryParams(
            response_type="code",
            client_id=self.config.client_id,
            redirect_uri=self.config.redirect_uri,
            scope=self.config.scopes,
            state=state,
            nonce=nonce,
            code_challenge=oidc.s256_challenge(code_verifier),
            code_challenge_method="S256",
        )
        separator = "&" if "?" in meta.authorization_endpoint else "?"
        return f"{meta.authorization_endpoint}{separator}{query}"

    async def exchange_code(self, code: str, code_verifier: str) -> str:
        """The ID token the token endpoint gives for ``code``."""
        meta = await self.metadata()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.config.redirect_uri,
            "code_verifier": code_verifier,
        }
        headers = {"Accept": "application/json"}
        methods = meta.token_endpoint_auth_methods_supported or ["client_secret_basic"]
        if "client_secret_basic" in methods:
            pair = f"{quote_plus(self.config.client_id)}:{quote_plus(self.config.client_secret)}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form["client_id"] = self.config.client_id
            form["client_secret"] = self.config.client_secret
        try:
            answer = await self._http().post(meta.token_endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise ProviderUnreachable(f"the token endpoint: {exc.__class__.__name__}") from None
        try:
            body = answer.json()
        except ValueError:
            body = None
        if answer.status_code in (400, 401) and isinstance(body, dict):
            error = str(body.get("error", "invalid_request"))[:100]
            raise CodeRefused(f"the provider refused the code ({error})")
        if answer.status_code != 200 or not isinstance(body, dict):
            raise ProviderUnreachable(f"the token endpoint answered {answer.status_code}")
        token = body.get("id_token")
        if not isinstance(token, str) or not token:
            raise IdTokenError("the provider sent no ID token")
        return token

    async def verify(self, id_token: str, nonce: str, now_s: int) -> Identity:
        """The person the ID token names, once it holds (:class:`IdTokenError` otherwise).
        A key id not in the cached keys fetches them again once (key rotation)."""
        meta = await self.metadata()
        algorithms = oidc.accepted_algorithms(meta.id_token_signing_alg_values_supported)
        for refresh in (False, True):
            try:
                claims = oidc.verify_id_token(
                    id_token,
                    await self.keys(refresh),
                    issuer=meta.issuer,
                    client_id=self.config.client_id,
                    nonce=nonce,
                    algorithms=algorithms,
                    now_s=now_s,
                )
            except UnknownKey:
                if refresh:
                    raise
                continue
            return oidc.identity_from(claims, self.config.groups_claim)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
