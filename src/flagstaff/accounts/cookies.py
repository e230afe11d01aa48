"""The session cookie's attributes, and whether a request came over TLS."""

from __future__ import annotations

from collections.abc import Mapping

SESSION_COOKIE = "flagstaff_session"
SAME_SITE = "Lax"  # Lax keeps links from e-mails and chat working; CSRF tokens cover the rest.


def request_is_secure(scheme: str, headers: Mapping[str, str], trust_forwarded: bool) -> bool:
    """True for https, or behind a proxy we trust that says the client used https."""
    if scheme == "https":
        return True
    if not trust_forwarded:
        return False
    forwarded = headers.get("x-forwarded-proto", "")
    # A chain of proxies appends: the first entry is what the client used.
    return forwarded.split(",")[0].strip().lower() == "https"


def set_cookie_header(
    name: str,
    value: str,
    *,
    max_age_s: int | None,
    secure: bool,
    path: str = "/",
    same_site: str = SAME_SITE,
    http_only: bool = True,
) -> str:
    """The value of one ``Set-Cookie`` header. ``max_age_s`` None makes a browser-session cookie."""
    if not _token_safe(name) or not _token_safe(value):
        raise ValueError("cookie names and values must be printable ASCII without ;,= or spaces")
    parts = [f"{name}={value}", f"Path={path}", f"SameSite={same_site}"]
    if max_age_s is not None:
        parts.append(f"Max-Age={max_age_s}")
    if http_only:
        parts.append("HttpOnly")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def session_cookie(token: str, max_age_s: int, secure: bool) -> str:
    return set_cookie_header(SESSION_COOKIE, token, max_age_s=max_age_s, secure=secure)


def clear_cookie(name: str, secure: bool) -> str:
    return set_cookie_header(name, "", max_age_s=0, secure=secure)


def _token_safe(text: str) -> bool:
    return all(33 <= ord(c) <= 126 and c not in ';,="\\' for c in text)
