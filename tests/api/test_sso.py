"""Single sign-on against a real OpenID Provider (npm's ``oidc-provider`` under Node, started
here) and the real server: sign-in with the mapped role, roles following the groups, refusals
(forged, expired, wrong-audience and other providers' tokens, a replayed code, a tampered
state, groups and domains not allowed, the provider unreachable), ``next`` kept inside the
console, password login only for break-glass users, and an admin ending someone's sessions."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from tests.api.test_accounts_api import run_cli
from tests.oidc_op import IdentityProvider, sign_in, to_callback, user
from tests.server import PERSONAL_KEY, Server, free_port

INIT_ADMIN = "local.admin@example.com"
PASSWORD = "correct horse battery staple"
P = "/api/projects/@current"
TOKEN_REFUSED = "could not be trusted"


class Sso:
    def __init__(self, server: Server, op: IdentityProvider) -> None:
        self.server = server
        self.op = op
        self.url = server.url
        self.callback = server.url + "/login/oidc/callback"
        self.api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )

    def activity(self, scope: str) -> list[dict[str, object]]:
        answer = self.api.get(f"{P}/activity_log/", params={"scope": scope})
        assert answer.status_code == 200, answer.text
        return answer.json()["results"]

    def member(self, email: str) -> dict[str, object] | None:
        members = self.api.get(f"{P}/members/").json()["results"]
        return next((m for m in members if m["user"]["email"] == email), None)


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sso]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    op = IdentityProvider(url + "/login/oidc/callback").start()
    server = Server(
        tmp_path_factory.mktemp("sso") / "data",
        port=port,
        env=op.sso_env(
            url,
            FLAGSTAFF_OIDC_ALLOWED_DOMAINS="example.com",
            FLAGSTAFF_OIDC_ONLY="true",
            FLAGSTAFF_INIT_ADMIN_EMAIL=INIT_ADMIN,
            FLAGSTAFF_INIT_ADMIN_PASSWORD=PASSWORD,
        ),
    )
    try:
        server.start()
        yield Sso(server, op)
    finally:
        server.stop()
        op.stop()


def session_cookie(answer: httpx.Response) -> str | None:
    for header in answer.headers.get_list("set-cookie"):
        name, _, rest = header.partition("=")
        if name == "flagstaff_session" and not rest.startswith(";"):
            return rest.split(";")[0]
    return None


def refused(answer: httpx.Response, status: int, text: str) -> None:
    assert answer.status_code == status, answer.text
    assert text in answer.text, answer.text
    assert session_cookie(answer) is None


def csrf_of(client: httpx.Client) -> str:
    page = client.get("/feature_flags")
    assert page.status_code == 200, page.text
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_the_login_page_offers_the_provider(sso: Sso) -> None:
    page = httpx.get(sso.url + "/login")
    assert "Sign in with Test IdP" in page.text
    assert 'href="/login/oidc?next=%2Ffeature_flags"' in page.text


def test_first_sign_in_creates_the_user_with_the_mapped_role(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "ann": user("ann@example.com", "flag-editors", "sales")})
    client, answer = sign_in(sso.url, "ann", "/experiments?tab=running")
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/experiments?tab=running"
    assert session_cookie(answer)
    member = sso.member("ann@example.com")
    assert member is not None
    assert member["role"] == "editor" and member["single_sign_on"] is True
    # the session acts with that role on the management API (an editor writes flags)
    headers = {"X-CSRF-Token": csrf_of(client), "Origin": sso.url}
    made = client.post(f"{P}/feature_flags/", json={"key": "ann-made"}, headers=headers)
    assert made.status_code == 201, made.text
    logins = [a for a in sso.activity("User") if a["activity"] == "logged_in"]
    assert any(a["detail"]["name"] == "ann@example.com" for a in logins)  # type: ignore[index]


def test_roles_follow_the_groups_at_every_login(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "bob": user("bob@example.com", "flag-admins")})
    first, answer = sign_in(sso.url, "bob")
    assert answer.status_code == 303
    assert sso.member("bob@example.com")["role"] == "admin"  # type: ignore[index]
    sso.op.set_groups("bob", "flag-viewers")
    _, again = sign_in(sso.url, "bob")
    assert again.status_code == 303
    assert sso.member("bob@example.com")["role"] == "viewer"  # type: ignore[index]
    # the first browser's session has the lower role from its next request
    headers = {"X-CSRF-Token": csrf_of(first), "Origin": sso.url}
    denied = first.post(f"{P}/feature_flags/", json={"key": "bob-made"}, headers=headers)
    assert denied.status_code == 403 and denied.json()["code"] == "permission_denied"
    changes = [
        a
        for a in sso.activity("Membership")
        if a["detail"]["name"] == "bob@example.com"  # type: ignore[index]
    ]
    roles = [
        c["after"]
        for a in changes
        for c in a["detail"]["changes"]  # type: ignore[index]
        if c["field"] == "role"
    ]
    assert roles[:2] == ["viewer", "admin"]  # newest first


def test_someone_removed_from_every_group_is_refused_with_sessions_and_keys(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "cat": user("cat@example.com", "flag-editors")})
    client, answer = sign_in(sso.url, "cat")
    assert answer.status_code == 303
    headers = {"X-CSRF-Token": csrf_of(client), "Origin": sso.url}
    made = client.post("/api/personal_api_keys/", json={"label": "cat's"}, headers=headers)
    assert made.status_code == 201, made.text
    key = made.json()["value"]
    definitions = "/api/feature_flag/local_evaluation"
    with httpx.Client(base_url=sso.url, headers={"Authorization": f"Bearer {key}"}) as api:
        assert api.get(f"{P}/feature_flags/").status_code == 200
        assert api.get(definitions).status_code == 200
        sso.op.set_groups("cat")
        _, again = sign_in(sso.url, "cat")
        refused(again, 403, "No access")
        assert "none of the person&#39;s groups" in again.text
        assert api.get(f"{P}/feature_flags/").status_code == 401
        assert api.get(definitions).status_code == 401
    assert client.get(f"{P}/feature_flags/").status_code == 401
    assert sso.member("cat@example.com") is None
    reasons = [
        a["detail"]["trigger"]["payload"]["reason"]  # type: ignore[index]
        for a in sso.activity("User")
        if a["activity"] == "login_refused" and a["detail"]["name"] == "cat@example.com"  # type: ignore[index]
    ]
    assert reasons and "not_allowed" in reasons[0]
    # back in a group: allowed again
    sso.op.set_groups("cat", "flag-viewers")
    _, back = sign_in(sso.url, "cat")
    assert back.status_code == 303
    assert sso.member("cat@example.com")["role"] == "viewer"  # type: ignore[index]


@pytest.mark.parametrize(
    ("person", "reason"),
    [
        (user("dan@elsewhere.org", "flag-admins"), "elsewhere.org is not allowed"),
        (user("eve@example.com", "flag-admins", verified=False), "is verified"),
    ],
)
def test_domains_not_allowed_and_unverified_emails_are_refused(
    sso: Sso, person: dict[str, object], reason: str
) -> None:
    login = str(person["email"]).split("@")[0]
    sso.op.set_users({**sso.op.users, login: person})
    _, answer = sign_in(sso.url, login)
    refused(answer, 403, reason)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("forged", "signature is not the provider"),
        ("unknown_key", "key the provider does not publish"),
        ("expired", "expired"),
        ("wrong_audience", "aud claim"),
        ("wrong_nonce", "nonce"),
        ("other_issuer", "key the provider does not publish"),
        ("alg_none", "algorithm"),
        ("hs256_public", "algorithm"),
    ],
)
def test_tokens_that_do_not_hold_are_refused(sso: Sso, mode: str, reason: str) -> None:
    sso.op.set_users({**sso.op.users, "fay": user("fay@example.com", "flag-admins")})
    sso.op.next_token_is(mode)
    _, answer = sign_in(sso.url, "fay")
    refused(answer, 400, TOKEN_REFUSED)
    assert reason in answer.text
    token_refusals = [
        a["detail"]["trigger"]["payload"]["reason"]  # type: ignore[index]
        for a in sso.activity("User")
        if a["activity"] == "login_refused"
    ]
    assert any(reason in str(r) for r in token_refusals)


def _callback_url(sso: Sso, client: httpx.Client, login: str) -> str:
    return to_callback(client, client.get("/login/oidc"), login, sso.callback)


def test_a_code_and_its_state_are_used_once(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "gil": user("gil@example.com", "flag-viewers")})
    client = httpx.Client(base_url=sso.url, timeout=30)
    url = _callback_url(sso, client, "gil")
    assert client.get(url).status_code == 303
    # the same callback again (a replay): its state was used up
    refused(client.get(url), 400, "already used")
    # the old code with a new sign-in's state: the provider refuses it
    fresh = httpx.Client(base_url=sso.url, timeout=30)
    new_url = _callback_url(sso, fresh, "gil")
    old_code = parse_qs(urlsplit(url).query)["code"][0]
    replayed = _with_query(new_url, code=old_code)
    refused(fresh.get(replayed), 400, "refused the sign-in code")


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return urlunsplit(parts._replace(query=urlencode({**query, **changes})))


def test_a_tampered_or_foreign_state_is_refused(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "hal": user("hal@example.com", "flag-viewers")})
    victim = httpx.Client(base_url=sso.url, timeout=30)
    url = _callback_url(sso, victim, "hal")
    state = parse_qs(urlsplit(url).query)["state"][0]
    refused(victim.get(_with_query(url, state=state[:-2] + "xx")), 400, "does not match")
    # the callback URL in another browser (login CSRF): that browser has no such state
    refused(httpx.get(url), 400, "does not match")
    # a URL naming another issuer (RFC 9207's iss) is refused too
    refused(victim.get(_with_query(url, iss="https://evil.example")), 400, "another issuer")


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example",
        "/\t/evil.example",
        "javascript:alert(1)",
        "http:evil.example",
    ],
)
def test_next_never_leaves_the_console(sso: Sso, target: str) -> None:
    sso.op.set_users({**sso.op.users, "ida": user("ida@example.com", "flag-viewers")})
    _, answer = sign_in(sso.url, "ida", target)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/feature_flags"


def test_password_login_is_for_break_glass_users_only(sso: Sso) -> None:
    def password_login(email: str, password: str) -> httpx.Response:
        client = httpx.Client(base_url=sso.url, timeout=30)
        form = client.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        return client.post(
            "/login",
            data={"email": email, "password": password, "csrf_token": token.group(1)},
            headers={"Origin": sso.url},
        )

    refused(password_login(INIT_ADMIN, PASSWORD), 403, "Password login is turned off")
    made = run_cli(
        sso.server, "user", "create", "--email", "glass@example.com", "--password", "-",
        "--role", "admin", "--break-glass", stdin="break glass password\n",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "break-glass" in made.stdout
    assert password_login("glass@example.com", "break glass password").status_code == 303
    # a wrong password is still just wrong
    refused(password_login("glass@example.com", "not the password"), 401, "not right")


def test_an_admin_ends_all_of_a_persons_sessions(sso: Sso) -> None:
    sso.op.set_users({**sso.op.users, "jo": user("jo@example.com", "flag-editors")})
    browsers = [sign_in(sso.url, "jo")[0] for _ in range(2)]
    assert all(b.get(f"{P}/feature_flags/").status_code == 200 for b in browsers)
    member = sso.member("jo@example.com")
    assert member is not None
    ended = sso.api.post(f"{P}/members/{member['id']}/end_sessions/")
    assert ended.status_code == 200, ended.text
    assert ended.json()["ended_sessions"] == 2
    assert all(b.get(f"{P}/feature_flags/").status_code == 401 for b in browsers)
    assert any(a["activity"] == "sessions_ended" for a in sso.activity("User"))
    # an editor may not do it
    editor = sign_in(sso.url, "jo")[0]
    headers = {"X-CSRF-Token": csrf_of(editor), "Origin": sso.url}
    denied = editor.post(f"{P}/members/{member['id']}/end_sessions/", headers=headers)
    assert denied.status_code == 403


def test_the_provider_sending_an_error_back_is_refused(sso: Sso) -> None:
    client = httpx.Client(base_url=sso.url, timeout=30)
    start = client.get("/login/oidc")
    state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
    answer = client.get("/login/oidc/callback", params={"state": state, "error": "access_denied"})
    refused(answer, 403, "access_denied")


def test_an_unreachable_provider_gets_a_page_and_no_session(tmp_path: Path) -> None:
    port, op_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    op = IdentityProvider(url + "/login/oidc/callback", {"kim": user("kim@example.com")}, op_port)
    op.issuer = f"http://127.0.0.1:{op_port}"  # nothing listens there yet
    server = Server(tmp_path / "data", port=port, env=op.sso_env(url)).start()
    try:
        answer = httpx.get(url + "/login/oidc")
        refused(answer, 502, "Identity provider unreachable")
        assert "discovery document" in answer.text
        # up for the sign-in, gone before the code is exchanged
        op.start()
        client = httpx.Client(base_url=url, timeout=30)
        callback = to_callback(
            client, client.get("/login/oidc"), "kim", url + "/login/oidc/callback"
        )
        op.stop()
        answer = client.get(callback)
        refused(answer, 502, "Identity provider unreachable")
        assert "token endpoint" in answer.text
        log = httpx.get(
            url + f"{P}/activity_log/",
            params={"scope": "User"},
            headers={"Authorization": f"Bearer {PERSONAL_KEY}"},
        ).json()["results"]
        assert "unreachable" in log[0]["detail"]["trigger"]["payload"]["reason"]
    finally:
        server.stop()
        op.stop()
    assert "single sign-on refused" in server.logs()


def test_without_single_sign_on_the_routes_do_not_exist(server: Server) -> None:
    assert httpx.get(server.url + "/login/oidc").status_code == 404
    assert "Sign in with" not in httpx.get(server.url + "/login").text
