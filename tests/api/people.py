"""Users of a test server: made with the CLI, each given a personal key through a console
session (so the key acts with the user's role)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.server import Api, Server

ROOT = Path(__file__).parents[2]
PASSWORD = "correct horse battery staple"


def make_user(server: Server, email: str, role: str) -> None:
    env = {**os.environ}
    if server.database_url:
        env["FLAGSTAFF_DATABASE_URL"] = server.database_url
    done = subprocess.run(
        [
            sys.executable, "-m", "flagstaff", "user", "create", "--email", email,
            "--password", PASSWORD, "--role", role, "--data-dir", str(server.data_dir),
        ],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@contextlib.contextmanager
def session(server: Server, email: str) -> Iterator[httpx.Client]:
    """A logged-in browser-like client that sends the CSRF header and Origin of the page."""
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        _log_in(client, server, email)
        yield client


def _log_in(client: httpx.Client, server: Server, email: str) -> None:
    form = client.get("/login")
    login_csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert login_csrf is not None
    done = client.post(
        "/login",
        data={"email": email, "password": PASSWORD, "csrf_token": login_csrf.group(1)},
        headers={"Origin": server.url},
    )
    assert done.status_code == 303, done.text
    page = client.get("/feature_flags")
    token = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
    assert token is not None
    client.headers.update({"X-CSRF-Token": token.group(1), "Origin": server.url})


def user_api(server: Server, email: str) -> Api:
    """A management API client with a personal key of ``email``'s own."""
    with session(server, email) as browser:
        made = browser.post("/api/personal_api_keys/", json={"label": f"{email} key"})
        assert made.status_code == 201, made.text
        return Api(server.url, made.json()["value"])
