"""A real OpenID Provider for the single sign-on tests: ``tests/e2e/tooling/oidc_provider.mjs``
(npm's ``oidc-provider``) under Node on a loopback port, and a client that signs in through it
the way a browser does (redirects, the provider's username form, the callback)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx

from tests.e2e.deps import TOOLING, node_tooling_problems, require

CLIENT_ID = "flagstaff-console"
CLIENT_SECRET = "a client secret of the test provider"
ROLE_MAP = "flag-admins=admin,flag-editors=editor,flag-viewers=viewer"


def user(email: str, *groups: str, verified: bool = True) -> dict[str, Any]:
    return {"email": email, "email_verified": verified, "groups": list(groups)}


@dataclass
class IdentityProvider:
    redirect_uri: str
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    port: int = 0
    """The provider's port (0: any free one)."""
    issuer: str = ""
    other_issuer: str = ""
    proc: subprocess.Popen[str] | None = None

    def start(self) -> IdentityProvider:
        require(node_tooling_problems())
        spec = {
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uri": self.redirect_uri,
            "users": self.users,
            "port": self.port,
        }
        self.proc = subprocess.Popen(
            ["node", "oidc_provider.mjs", json.dumps(spec)],
            cwd=TOOLING,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the test provider did not start")
        ready = json.loads(line)
        self.issuer, self.other_issuer = ready["issuer"], ready["other_issuer"]
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def set_users(self, users: dict[str, dict[str, Any]]) -> None:
        self.users = users
        httpx.post(self.issuer + "/_test/users", json=users).raise_for_status()

    def set_groups(self, login: str, *groups: str) -> None:
        self.users[login] = {**self.users[login], "groups": list(groups)}
        self.set_users(self.users)

    def next_token_is(self, mode: str) -> None:
        """The next token response carries a bad ID token (see the script's modes)."""
        httpx.post(self.issuer + "/_test/mischief", json={"mode": mode}).raise_for_status()

    def sso_env(self, public_url: str, **extra: str) -> dict[str, str]:
        return {
            "FLAGSTAFF_PUBLIC_URL": public_url,
            "FLAGSTAFF_OIDC_ISSUER": self.issuer,
            "FLAGSTAFF_OIDC_CLIENT_ID": CLIENT_ID,
            "FLAGSTAFF_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "FLAGSTAFF_OIDC_ROLE_MAP": ROLE_MAP,
            "FLAGSTAFF_OIDC_NAME": "Test IdP",
            **extra,
        }


def to_callback(client: httpx.Client, start: httpx.Response, login: str, callback: str) -> str:
    """Follow the provider's redirects from the console's 303 to it, sign in as ``login`` on
    its form, and return the callback URL (with code and state) it sends the browser to."""
    assert start.status_code == 303, start.text
    url = start.headers["location"]
    for _ in range(12):
        if url.startswith(callback):
            return url
        answer = client.get(url)
        if answer.status_code in (302, 303):
            url = urljoin(url, answer.headers["location"])
            continue
        form = re.search(r'<form method="post" action="([^"]+)"', answer.text)
        assert answer.status_code == 200 and form is not None, answer.text
        posted = client.post(urljoin(url, form.group(1)), data={"login": login})
        assert posted.status_code in (302, 303), posted.text
        url = urljoin(url, posted.headers["location"])
    raise AssertionError(f"the provider never sent the browser back: {url}")


def sign_in(
    base_url: str, login: str, next_path: str | None = None, client: httpx.Client | None = None
) -> tuple[httpx.Client, httpx.Response]:
    """A browser-like client through /login/oidc, the provider and the callback; the callback's
    answer (a 303 with the session cookie, or a refusal page)."""
    client = client or httpx.Client(base_url=base_url, timeout=30.0)
    params = {"next": next_path} if next_path is not None else {}
    start = client.get("/login/oidc", params=params)
    url = to_callback(client, start, login, base_url + "/login/oidc/callback")
    return client, client.get(url)
