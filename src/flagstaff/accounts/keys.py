"""Project tokens and personal API keys: their shapes, generation and hashing."""

from __future__ import annotations

import hashlib
import secrets

PROJECT_TOKEN_PREFIX = "phc_"
PERSONAL_KEY_PREFIX = "phx_"


def new_project_token() -> str:
    return PROJECT_TOKEN_PREFIX + secrets.token_urlsafe(32).replace("-", "x").replace("_", "y")


def new_personal_key() -> str:
    return PERSONAL_KEY_PREFIX + secrets.token_urlsafe(32).replace("-", "x").replace("_", "y")


def hash_key(value: str) -> str:
    """Personal keys are stored only as this digest (the form PostHog uses)."""
    return "sha256$" + hashlib.sha256(value.encode()).hexdigest()


def mask_key(value: str) -> str:
    return f"{value[:4]}...{value[-4:]}"


def check_project_token(token: str) -> str | None:
    """Why ``token`` cannot be a project token, or None when its shape is acceptable."""
    if not token:
        return "the project token is empty"
    if not token.isascii() or not token.isprintable():
        return "the project token must be printable ASCII"
    if len(token) > 64:
        return "the project token is longer than 64 characters"
    if token.startswith(PERSONAL_KEY_PREFIX):
        return "a personal API key was sent where the project token belongs"
    return None


def check_personal_key(value: str) -> str | None:
    if not value.startswith(PERSONAL_KEY_PREFIX) or len(value) < 20 or not value.isascii():
        return "a personal API key starts with phx_ and has at least 20 characters"
    return None
