"""CSRF tokens bound to the session (a stateless synchronizer token).

The token is an HMAC of the session's secret token, which only the server and the HttpOnly
cookie know: a page on another origin can neither read the cookie nor compute the token, and a
token from one session is worthless in another. Nothing extra is stored; logging out (deleting
the session) invalidates it. Every state-changing request with a session cookie must carry it
in the ``X-CSRF-Token`` header (JavaScript) or the ``csrf_token`` form field (plain forms).

Before login there is no session; the login form uses a double-submit pair instead: a random
``flagstaff_login_csrf`` cookie whose value the form repeats.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from urllib.parse import urlsplit

CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
LOGIN_CSRF_COOKIE = "flagstaff_login_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PURPOSE = b"flagstaff-csrf-v1"


def csrf_token_for(session_token: str) -> str:
    return hmac.new(session_token.encode(), _PURPOSE, hashlib.sha256).hexdigest()


def csrf_valid(session_token: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(csrf_token_for(session_token), presented)


def new_login_csrf() -> str:
    return secrets.token_urlsafe(32)


def login_csrf_valid(cookie_value: str | None, presented: str | None) -> bool:
    if not cookie_value or not presented:
        return False
    return hmac.compare_digest(cookie_value, presented)


def needs_csrf(method: str) -> bool:
    return method.upper() not in SAFE_METHODS


def origin_allowed(headers: Mapping[str, str], host: str) -> bool:
    """A second line of defence: a state-changing request whose ``Origin`` (or, without it,
    ``Referer``) names another host is refused. Neither header present is allowed (non-browser
    clients send neither; browsers always send Origin on cross-origin POSTs)."""
    source = headers.get("origin") or headers.get("referer")
    if source is None or source == "":
        return True
    if source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()
