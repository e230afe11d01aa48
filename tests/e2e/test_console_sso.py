"""Single sign-on in a real browser (Playwright, Debian's Chromium) against the real server and a
real OpenID Provider (npm's ``oidc-provider``, started here): a person lands in the console
with the role their groups map to; a person in no allowed group is shown why and gets no
session; a role changed at the provider applies at the next login."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_console_editor import browser, page
from tests.oidc_op import IdentityProvider, user
from tests.server import Server, free_port

__all__ = ["browser", "page"]  # the browser fixtures of the console's journeys


class Console:
    def __init__(self, server: Server, op: IdentityProvider) -> None:
        self.server, self.op, self.url = server, op, server.url


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    op = IdentityProvider(
        url + "/login/oidc/callback",
        {
            "ada": user("ada@example.com", "flag-admins"),
            "ben": user("ben@example.com", "sales"),
            "cy": user("cy@example.com", "flag-editors"),
        },
    ).start()
    server = Server(tmp_path_factory.mktemp("sso-console") / "data", port=port, env=op.sso_env(url))
    try:
        server.start()
        yield Console(server, op)
    finally:
        server.stop()
        op.stop()
    errors = [line for line in server.logs().splitlines() if '"level":"error"' in line]
    assert not errors, errors


def _sign_in(page: Any, console: Console, login: str) -> None:
    """From a console page to the provider's form and back, as a person does."""
    page.goto(f"{console.url}/feature_flags")
    page.wait_for_url(f"{console.url}/login?next=%2Ffeature_flags")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.wait_for_url(f"{console.op.issuer}/interaction/**")
    page.get_by_label("Username").fill(login)
    page.get_by_role("button", name="Continue").click()


def _session(page: Any) -> list[Any]:
    return [c for c in page.context.cookies() if c["name"] == "flagstaff_session"]


def test_a_person_lands_with_the_role_their_groups_map_to(page: Any, console: Console) -> None:
    _sign_in(page, console, "ada")
    page.wait_for_url(f"{console.url}/feature_flags")
    who = page.locator(".who")
    assert who.get_by_role("link", name="ada@example.com").is_visible()
    assert who.locator(".role").inner_text() == "admin"
    page.get_by_role("link", name="Members").click()
    row = page.get_by_role("row").filter(has_text="ada@example.com")
    assert row.get_by_text("SSO").is_visible()
    assert row.get_by_label("Role of ada@example.com").input_value() == "admin"
    assert _session(page)


def test_a_person_in_no_allowed_group_is_told_why_and_gets_no_session(
    page: Any, console: Console
) -> None:
    _sign_in(page, console, "ben")
    page.wait_for_url(f"{console.url}/login/oidc/callback?**")
    assert page.get_by_role("heading", name="No access").is_visible()
    assert "none of the person's groups is given a role here" in page.locator("main").inner_text()
    assert not _session(page)
    page.goto(f"{console.url}/feature_flags")
    page.wait_for_url(f"{console.url}/login?next=%2Ffeature_flags")


def test_a_role_changed_at_the_provider_applies_at_the_next_login(
    page: Any, console: Console
) -> None:
    _sign_in(page, console, "cy")
    page.wait_for_url(f"{console.url}/feature_flags")
    assert page.locator(".who .role").inner_text() == "editor"
    assert page.get_by_role("link", name="New feature flag").count() > 0

    console.op.set_groups("cy", "flag-viewers")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{console.url}/login")
    # the provider remembers the person: signing in again needs no form
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.wait_for_url(f"{console.url}/feature_flags")
    assert page.locator(".who .role").inner_text() == "viewer"
    assert page.get_by_role("link", name="New feature flag").count() == 0


def test_an_admin_ends_a_persons_sessions_from_the_members_page(
    page: Any, browser: Any, console: Console
) -> None:
    elsewhere = browser.new_context()
    try:
        cys = elsewhere.new_page()
        _sign_in(cys, console, "cy")
        cys.wait_for_url(f"{console.url}/feature_flags")
        _sign_in(page, console, "ada")
        page.wait_for_url(f"{console.url}/feature_flags")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("link", name="Members").click()
        page.get_by_role("button", name="End sessions of cy@example.com").click()
        ended = page.get_by_role("status").filter(has_text="of cy@example.com ended")
        ended.wait_for()
        assert re.match(r"[1-9]\d* session", ended.inner_text())
        cys.reload()
        cys.wait_for_url(f"{console.url}/login?next=%2Ffeature_flags")
    finally:
        elsewhere.close()
