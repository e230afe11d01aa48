"""Which runtime a /flags request comes from, and which flags each runtime receives."""

from __future__ import annotations

import functools

CLIENT = "client"
SERVER = "server"

_SERVER_SDKS = frozenset(
    {"python", "ruby", "php", "java", "go", "node", "dotnet", "elixir", "rs", "server"}
)
_CLIENT_SDKS = frozenset({"js", "android", "ios", "react-native", "flutter"})
_BROWSER_TOKENS = ("Mozilla/", "Chrome/", "Safari/", "Firefox/", "Edge/")
_HTTP_CLIENT_TOKENS = ("python-requests/", "curl/")


@functools.lru_cache(maxsize=1024)
def _from_user_agent(user_agent: str) -> str | None:
    """Memoised: a few SDK and browser User-Agents make most requests."""
    if user_agent.startswith("posthog-"):
        name, slash, version = user_agent[len("posthog-") :].partition("/")
        if not slash or not name or not version.split(" ")[0]:
            return None
        if name in _SERVER_SDKS:
            return SERVER
        if name in _CLIENT_SDKS:
            return CLIENT
        return None
    if any(token in user_agent for token in _BROWSER_TOKENS):
        return CLIENT
    if any(token in user_agent for token in _HTTP_CLIENT_TOKENS):
        return SERVER
    return None


def detect_runtime(
    body_runtime: str | None, user_agent: str | None, has_client_headers: bool
) -> str | None:
    """``"client"``, ``"server"`` or None (unknown).

    Order: an explicit ``evaluation_runtime`` in the body; the User-Agent (PostHog SDK
    names, browsers, python-requests and curl); then any of the Origin, Referer,
    Sec-Fetch-Mode or Sec-Fetch-Site headers, which mean a client.
    """
    if isinstance(body_runtime, str) and body_runtime.lower() in (CLIENT, SERVER):
        return body_runtime.lower()
    if user_agent:
        detected = _from_user_agent(user_agent)
        if detected is not None:
            return detected
    if has_client_headers:
        return CLIENT
    return None


def runtime_allows(flag_runtime: str | None, request_runtime: str | None) -> bool:
    """A flag set to ``server`` or ``client`` only reaches that runtime; unknown requests
    get only flags without a runtime requirement (none or ``all``)."""
    return flag_runtime is None or flag_runtime == request_runtime


def contexts_allow(flag_contexts: frozenset[str], requested: frozenset[str] | None) -> bool:
    return not requested or not flag_contexts or not flag_contexts.isdisjoint(requested)
