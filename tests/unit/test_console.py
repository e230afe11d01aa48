"""The console: views from plain flag JSON, rendered pages (labels, escaping), page routes."""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from argon2 import PasswordHasher
from starlette.applications import Starlette
from starlette.testclient import TestClient

from flagstaff.accounts import csrf, sessions, throttle
from flagstaff.accounts.records import Role
from flagstaff.console import templates, views
from flagstaff.console.page import STATIC_URL, ProjectInfo
from flagstaff.console.routes import ConsoleSettings, console_routes
from flagstaff.flags.operators import ALL_OPERATORS
from tests.stored_flags import stored_flag
from tests.unit.console_fakes import MemoryAccounts, MemoryData

DAY = views.DAY_MS
NOW = 1_800_000_000_000
EVIL = '<script>alert("x")</script>&'
FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


def _flag(id: int, key: str, **fields: Any) -> dict[str, Any]:
    flag: dict[str, Any] = {
        "id": id,
        "key": key,
        "name": "",
        "active": True,
        "deleted": False,
        "filters": {"groups": [{"properties": [], "rollout_percentage": 50}]},
        "tags": [],
        "version": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    flag.update(fields)
    return flag


FULL_FLAG = _flag(
    7,
    "checkout-v2",
    name=EVIL,
    tags=["payments", EVIL],
    evaluation_runtime="server",
    evaluation_contexts=["web", "docs"],
    ensure_experience_continuity=True,
    bucketing_identifier="device_id",
    filters={
        "aggregation_group_type_index": 0,
        "groups": [
            {
                "properties": [
                    {"key": "email", "type": "person", "operator": "icontains", "value": EVIL},
                    {
                        "key": "plan",
                        "type": "person",
                        "operator": "exact",
                        "value": ["pro", "team"],
                    },
                    {
                        "key": "size",
                        "type": "group",
                        "group_type_index": 0,
                        "operator": "between",
                        "value": [10, 100],
                    },
                    {"key": "id", "type": "cohort", "operator": "not_in", "value": 3},
                    {"key": "8", "type": "flag", "operator": "flag_evaluates_to", "value": "blue"},
                ],
                "rollout_percentage": 25,
                "variant": "blue",
            }
        ],
        "multivariate": {
            "variants": [
                {"key": "blue", "name": "Blue", "rollout_percentage": 60},
                {"key": "green", "name": "", "rollout_percentage": 40},
            ]
        },
        "payloads": {"blue": '{"x": "</textarea><script>1</script>"}'},
        "holdout": {"id": 4, "exclusion_percentage": 10},
    },
)


# views -------------------------------------------------------------------------------------


def test_flag_types_and_rollout_summary() -> None:
    assert views.flag_type(_flag(1, "a")) is views.FlagType.BOOLEAN
    assert views.flag_type(FULL_FLAG) is views.FlagType.MULTIVARIATE
    assert (
        views.flag_type(_flag(1, "a", is_remote_configuration=True)) is views.FlagType.REMOTE_CONFIG
    )
    assert views.rollout_summary(_flag(1, "a")) == "50% of everyone"
    assert views.rollout_summary(FULL_FLAG) == "25% of 5 filters"
    assert views.rollout_summary(_flag(1, "a", filters={"groups": []})) == "no release conditions"


def test_stale_rules() -> None:
    old = _flag(1, "old")
    recent_use = views.FlagUsage(checks_per_day=3, last_seen_ms=NOW - DAY)
    assert views.stale_reason(old, views.NO_USAGE, NOW) == "not checked for 30 days"
    assert views.stale_reason(old, views.FlagUsage(1, NOW - 30 * DAY), NOW) is not None
    assert views.stale_reason(old, recent_use, NOW) is None
    everyone = _flag(2, "on", filters={"groups": [{"properties": [], "rollout_percentage": 100}]})
    assert views.stale_reason(everyone, recent_use, NOW) == "at 100% for 30 days"
    changed = dict(everyone, updated_at="2027-01-14T00:00:00Z")  # 1 day before NOW
    assert views.stale_reason(changed, recent_use, NOW) is None
    young = _flag(3, "new", created_at="2027-01-10T00:00:00Z")
    assert views.stale_reason(young, views.NO_USAGE, NOW) is None


def test_list_filters_search_status_type_tag_stale() -> None:
    flags = [
        _flag(1, "alpha", name="First", tags=["a"]),
        _flag(2, "beta", active=False, tags=["b"]),
        FULL_FLAG,
        _flag(4, "gone", deleted=True),
    ]
    usage = {"checkout-v2": views.FlagUsage(10, NOW - DAY)}

    def keys(**query: str) -> list[str]:
        filters = views.ListFilters.from_query(query)
        return [r.key for r in views.flag_rows(flags, usage, filters, NOW)]

    assert keys() == ["alpha", "beta", "checkout-v2"]
    assert keys(search="FIRST") == ["alpha"]
    assert keys(active="false") == ["beta"]
    assert keys(type="multivariate") == ["checkout-v2"]
    assert keys(tag="b") == ["beta"]
    assert keys(stale="true") == ["alpha", "beta"]
    assert keys(stale="false") == ["checkout-v2"]
    assert keys(active="maybe", type="nonsense") == ["alpha", "beta", "checkout-v2"]
    assert views.all_tags(flags) == sorted(["a", "b", "payments", EVIL])


def test_editor_model_from_flag_json() -> None:
    model = views.editor_model(stored_flag(FULL_FLAG, FULL_FLAG["id"]))
    assert model.tags == f"payments, {EVIL}"
    assert model.aggregation_group_type_index == 0
    filters = model.conditions[0].filters
    assert [f.type for f in filters] == ["person", "person", "group", "cohort", "flag"]
    assert filters[1].value == "pro\nteam"
    assert filters[2].value == "10\n100" and filters[2].group_type_index == 0
    assert filters[3].value == "3" and filters[3].operator == "not_in"
    assert model.conditions[0].rollout_percentage == "25" and model.conditions[0].variant == "blue"
    assert [v.payload for v in model.variants] == ['{"x": "</textarea><script>1</script>"}', ""]
    assert (model.holdout_id, model.holdout_exclusion) == ("4", "10")
    new = views.editor_model(None)
    assert new.id is None and new.active and len(new.conditions) == 1


def test_every_operator_has_a_label_and_a_place_in_the_builder() -> None:
    offered = {op for _, ops in views.PROPERTY_OPERATOR_GROUPS for op in ops}
    offered |= set(views.COHORT_OPERATOR_CHOICES) | set(views.FLAG_OPERATOR_CHOICES)
    assert offered == set(ALL_OPERATORS)
    assert set(views.OPERATOR_LABELS) == set(ALL_OPERATORS)


# rendering ---------------------------------------------------------------------------------


class _Controls(HTMLParser):
    """Collects form controls without a visible label, and buttons without a name."""

    def __init__(self) -> None:
        super().__init__()
        self.label_depth = 0
        self.label_for: set[str] = set()
        self.controls: list[dict[str, str | None]] = []
        self.unlabelled: list[dict[str, str | None]] = []
        self.buttons: list[str] = []
        self._button: list[str] | None = None
        self.template_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "label":
            self.label_depth += 1
            if a.get("for"):
                self.label_for.add(str(a["for"]))
        elif tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a)
            if self.label_depth == 0:
                self.unlabelled.append(a)
        elif tag == "button":
            self._button = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self.label_depth -= 1
        elif tag == "button" and self._button is not None:
            self.buttons.append(" ".join("".join(self._button).split()))
            self._button = None

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button.append(data)


def _check_accessible(page: str) -> _Controls:
    parser = _Controls()
    parser.feed(page)
    missing = [c for c in parser.unlabelled if c.get("id") not in parser.label_for]
    assert not missing, f"controls without a visible label: {missing}"
    assert parser.buttons and all(len(b) >= 3 for b in parser.buttons), parser.buttons
    assert "Submit" not in parser.buttons and "OK" not in parser.buttons
    return parser


def _base_context(**extra: Any) -> dict[str, Any]:
    context: dict[str, Any] = {
        "user": {"email": "ada@example.com"},
        "csrf_token": "tok",
        "project": ProjectInfo(1, "Default project"),
        "role": "editor",
        "static_url": STATIC_URL,
        "nav": "flags",
    }
    context.update(extra)
    return context


def _editor_page(json: dict[str, Any] | None, can_edit: bool = True) -> str:
    flag = None if json is None else stored_flag(json, json["id"], json.get("version", 1))
    builder = {
        "group_types": [(0, "company")],
        "cohorts": [{"id": 3, "name": "Beta <testers>"}],
        "other_flags": [{"id": 8, "key": "dark-mode"}],
        "property_keys": ["email", EVIL],
    }
    return templates.render(
        "flag_edit.html",
        **_base_context(),
        flag=views.editor_model(flag),
        ctx=builder,
        can_edit=can_edit,
    )


def test_editor_renders_every_part_with_labels_and_escaped_values() -> None:
    page = _editor_page(FULL_FLAG)
    parser = _check_accessible(page)
    assert "<script>alert" not in page and "</textarea><script>1" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in page
    for expected in (
        "Save feature flag",
        "Delete feature flag",
        "Add condition set",
        "Add filter to condition set 1",
        "Remove filter 5 from condition set 1",
        "Remove variant 2",
        "Add variant",
    ):
        assert expected in parser.buttons, expected
    # Values land in their controls, the chosen options selected.
    assert re.search(r'<option value="icontains" selected>contains</option>', page)
    assert re.search(r'<option value="between" selected>between</option>', page)
    assert re.search(r'<option value="not_in" selected>not in cohort</option>', page)
    assert re.search(r'<option value="8" selected>dark-mode</option>', page)
    assert re.search(r'<option value="3" selected>Beta &lt;testers&gt;</option>', page)
    assert re.search(r'<option value="0" selected>Group: company</option>', page)
    assert re.search(r'<option value="server" selected>Server only</option>', page)
    assert re.search(r'<option value="device_id" selected>Device id</option>', page)
    assert re.search(r'<option value="blue" selected>blue</option>', page)
    assert 'value="web, docs"' in page and 'value="4"' in page and 'value="10"' in page
    assert ">pro\nteam</textarea>" in page and "data-split-total>100.0<" in page
    assert re.search(r'name="ensure_experience_continuity" checked', page)
    assert 'data-flag-id="7"' in page and 'data-flag-version="1"' in page
    # The builder offers every operator.
    for op in ALL_OPERATORS:
        assert f'value="{op}"' in page, op
    # A CSP without 'unsafe-inline' needs no inline script.
    assert "<script>" not in page and " onclick=" not in page


def test_new_flag_and_read_only_editor() -> None:
    new = _editor_page(None)
    _check_accessible(new)
    assert "Create feature flag" in new and "Delete feature flag" not in new
    viewer = _editor_page(FULL_FLAG, can_edit=False)
    assert "view access" in viewer and "Save feature flag" not in viewer
    assert re.search(r'<fieldset class="plain" disabled>', viewer)


def test_flags_list_renders_rows_filters_and_escapes() -> None:
    flags = [_flag(1, "alpha", name=EVIL, tags=[EVIL]), _flag(2, "beta", tags=["payments"])]
    filters = views.ListFilters.from_query({"tag": EVIL})
    rows = views.flag_rows(flags, {}, filters, NOW)
    page = templates.render(
        "flags.html",
        **_base_context(),
        filters=filters,
        rows=rows,
        total=2,
        tags=views.all_tags(flags),
        can_edit=True,
    )
    _check_accessible(page)
    assert "<script>alert" not in page
    assert '<a href="/feature_flags/1">alpha</a>' in page
    assert "beta" not in page.split("<tbody>")[1]  # filtered out by tag
    assert "Stale: not checked for 30 days" in page
    assert "1 of 2 flags" in page
    assert re.search(r'<option value="&lt;script&gt;[^"]*" selected>', page)
    assert "Apply filters" in page and "New feature flag" in page and "Log out" in page


def test_login_page_is_labelled() -> None:
    page = templates.render(
        "login.html",
        user=None,
        csrf_token="",
        project=None,
        role="",
        static_url=STATIC_URL,
        nav="",
        login_csrf="c",
        error=EVIL,
        email=EVIL,
        next="/feature_flags",
    )
    parser = _check_accessible(page)
    assert parser.buttons == ["Log in"]
    assert "<script>alert" not in page


# routes ------------------------------------------------------------------------------------

PASSWORD = "correct horse battery"


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def _data() -> MemoryData:
    return MemoryData([_flag(1, "alpha", name="First"), FULL_FLAG])


def _client(
    role: Role = Role.EDITOR,
    settings: ConsoleSettings | None = None,
    data: MemoryData | None = None,
) -> tuple[TestClient, MemoryAccounts, _Clock]:
    accounts = MemoryAccounts()
    data = data or _data()

    async def setup() -> None:
        user = await accounts.create_user("ada@example.com", FAST.hash(PASSWORD), 0)
        await accounts.set_membership(user.id, 1, role, 0)

    asyncio.run(setup())
    clock = _Clock()
    app = Starlette(routes=console_routes(accounts, data, settings or ConsoleSettings(), clock))
    return TestClient(app, base_url="http://console.test"), accounts, clock


def _login(client: TestClient, password: str = PASSWORD, **headers: str) -> Any:
    client.get("/login")
    token = client.cookies.get(csrf.LOGIN_CSRF_COOKIE)
    return client.post(
        "/login",
        data={
            "email": " ADA@example.com",
            "password": password,
            "csrf_token": token or "",
            "next": "/feature_flags/7",
        },
        headers=headers,
        follow_redirects=False,
    )


def test_pages_need_a_session() -> None:
    client, _, _ = _client()
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 303 and home.headers["location"] == "/login"
    flags = client.get("/feature_flags?tag=a", follow_redirects=False)
    assert flags.status_code == 303
    assert flags.headers["location"] == "/login?next=%2Ffeature_flags%3Ftag%3Da"
    login = client.get("/login")
    assert login.status_code == 200 and "Log in to Flagstaff" in login.text
    assert "script-src 'self'" in login.headers["content-security-policy"]
    assert "SameSite=Strict" in login.headers["set-cookie"]


def test_login_sets_a_secure_session_cookie_and_pages_render() -> None:
    client, accounts, _ = _client()
    response = _login(client)
    assert response.status_code == 303 and response.headers["location"] == "/feature_flags/7"
    cookie = next(c for c in response.headers.get_list("set-cookie") if "flagstaff_session" in c)
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    token = cookie.split(";")[0].split("=", 1)[1]
    stored = next(iter(accounts.sessions))
    assert stored == sessions.hash_session_token(token) and token not in stored
    # The weak test hash was upgraded to the current parameters at login.
    assert accounts.users[1].password_hash.startswith("$argon2id$v=19$m=65536")
    page = client.get("/feature_flags")
    assert page.status_code == 200 and "alpha" in page.text
    assert f'<meta name="csrf-token" content="{csrf.csrf_token_for(token)}">' in page.text
    assert client.get("/feature_flags?search=checkout").text.count("/feature_flags/7") == 1
    editor = client.get("/feature_flags/7")
    assert editor.status_code == 200 and "Save feature flag" in editor.text
    assert client.get("/feature_flags/99").status_code == 404
    assert client.get("/feature_flags/new").status_code == 200
    assert client.get(f"{STATIC_URL}/console.js").status_code == 200


def test_secure_cookie_behind_a_trusted_tls_proxy_only() -> None:
    client, _, _ = _client(settings=ConsoleSettings(trust_forwarded=True))
    response = _login(client, **{"x-forwarded-proto": "https"})
    cookie = next(c for c in response.headers.get_list("set-cookie") if "flagstaff_session" in c)
    assert cookie.endswith("; HttpOnly; Secure")
    untrusted, _, _ = _client()
    response = _login(untrusted, **{"x-forwarded-proto": "https"})
    cookie = next(c for c in response.headers.get_list("set-cookie") if "flagstaff_session" in c)
    assert "Secure" not in cookie


def test_login_refusals_csrf_wrong_password_throttle() -> None:
    policy = throttle.ThrottlePolicy(
        window_ms=60_000, max_failures_per_email=3, max_failures_per_ip=50
    )
    client, _, clock = _client(settings=ConsoleSettings(throttle_policy=policy))
    no_token = client.post(
        "/login", data={"email": "ada@example.com", "password": PASSWORD}, follow_redirects=False
    )
    assert no_token.status_code == 403
    cross = _login(client, origin="https://evil.example")
    assert cross.status_code == 403
    for _ in range(3):
        wrong = _login(client, password="not the password")
        assert wrong.status_code == 401 and "not right" in wrong.text
    throttled = _login(client)
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) == 60
    clock.now += 60_000
    assert _login(client).status_code == 303


def test_open_redirects_refused() -> None:
    client, _, _ = _client()
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        client.cookies.clear()
        client.get("/login")
        token = client.cookies.get(csrf.LOGIN_CSRF_COOKIE)
        response = client.post(
            "/login",
            data={
                "email": "ada@example.com",
                "password": PASSWORD,
                "csrf_token": token or "",
                "next": target,
            },
            follow_redirects=False,
        )
        assert response.headers["location"] == "/feature_flags"


def test_logout_needs_the_csrf_token_and_ends_the_session() -> None:
    client, accounts, _ = _client()
    _login(client)
    refused = client.post("/logout", data={}, follow_redirects=False)
    assert refused.status_code == 403 and accounts.sessions
    token = client.cookies.get("flagstaff_session") or ""
    done = client.post(
        "/logout", data={"csrf_token": csrf.csrf_token_for(token)}, follow_redirects=False
    )
    assert done.status_code == 303 and not accounts.sessions
    assert "Max-Age=0" in done.headers["set-cookie"]
    client.cookies.set("flagstaff_session", token)
    assert client.get("/feature_flags", follow_redirects=False).status_code == 303


def test_sessions_end_when_idle() -> None:
    client, accounts, clock = _client()
    _login(client)
    clock.now += sessions.DEFAULT_POLICY.idle_timeout_ms - 1
    assert client.get("/feature_flags").status_code == 200  # touches the session
    clock.now += sessions.DEFAULT_POLICY.idle_timeout_ms - 1
    assert client.get("/feature_flags").status_code == 200
    clock.now += sessions.DEFAULT_POLICY.idle_timeout_ms
    assert client.get("/feature_flags", follow_redirects=False).status_code == 303
    assert not accounts.sessions


def test_viewers_see_read_only_pages() -> None:
    client, _, _ = _client(Role.VIEWER)
    _login(client)
    listing = client.get("/feature_flags")
    assert "New feature flag" not in listing.text
    editor = client.get("/feature_flags/7")
    assert "Save feature flag" not in editor.text and "view access" in editor.text
    assert client.get("/feature_flags/new").status_code == 403


def test_non_members_are_refused() -> None:
    client, _, _ = _client()
    _login(client)
    assert client.get("/feature_flags?project=2").status_code == 403


@pytest.mark.parametrize("path", ["/", "/login", "/feature_flags", "/feature_flags/new"])
def test_console_paths_do_not_clash_with_public_routes(path: str) -> None:
    from flagstaff.app import public_routes

    assert (path.rstrip("/") or "/") not in public_routes()


def _with_history(client_data: MemoryData) -> None:
    from flagstaff.activity.diff import record_change
    from flagstaff.activity.records import Actor, Scope, StoredActivity
    from flagstaff.activity.rollback import FlagVersion

    v1 = dict(FULL_FLAG, version=1)
    v2 = dict(FULL_FLAG, version=2, active=False, name="renamed " + EVIL)
    ada = Actor(user_id=1, email="ada@example.com")
    created = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=7,
        actor=ada,
        before=None,
        after=v1,
        now_ms=NOW - DAY,
    )
    updated = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=7,
        actor=ada,
        before=v1,
        after=v2,
        now_ms=NOW,
    )
    assert created is not None and updated is not None
    client_data.activity = [StoredActivity(1, "u1", created), StoredActivity(2, "u2", updated)]
    client_data.versions = {
        7: [FlagVersion(1, v1, NOW - DAY, 1, activity_id=1), FlagVersion(2, v2, NOW, 1, 2)]
    }
    client_data.flags[1] = v2


def test_history_page_shows_readable_diffs_and_rollback_for_editors() -> None:
    data = _data()
    _with_history(data)
    client, _, _ = _client(data=data)
    _login(client)
    page = client.get("/feature_flags/7/history")
    assert page.status_code == 200
    _check_accessible(page.text)
    text = page.text
    assert "Updated by ada@example.com" in text and "(version 2)" in text
    assert "Created by ada@example.com" in text
    assert '<th scope="row" title="active">Enabled</th>' in text
    assert "<code>true</code>" in text and "<code>false</code>" in text
    assert "<script>alert" not in text
    assert "Roll back to version 1" in text and "Roll back to version 2" not in text
    assert 'href="/feature_flags/7/history"' in client.get("/feature_flags/7").text


def test_history_page_has_no_rollback_for_viewers() -> None:
    data = _data()
    _with_history(data)
    client, _, _ = _client(Role.VIEWER, data=data)
    _login(client)
    page = client.get("/feature_flags/7/history")
    assert page.status_code == 200 and "Roll back" not in page.text
    assert client.get("/feature_flags/99/history").status_code == 404


def test_account_page_lists_keys_by_prefix_never_the_secret() -> None:
    client, accounts, _ = _client()
    _, secret = asyncio.run(accounts.create_user_key(1, 1, "ci <bot>", NOW))
    other, _ = asyncio.run(accounts.create_user_key(1, None, "bootstrap", NOW))
    asyncio.run(accounts.revoke_key(1, other.id, NOW))
    _login(client)
    page = client.get("/account")
    assert page.status_code == 200
    parser = _check_accessible(page.text)
    assert "Revoke key ci &lt;bot&gt;" in page.text and "Create personal API key" in parser.buttons
    assert secret[:8] in page.text and secret not in page.text
    assert "bootstrap" not in page.text  # an editor sees only their own keys


def test_admins_see_every_key_of_the_project_with_owners() -> None:
    client, accounts, _ = _client(Role.ADMIN)
    asyncio.run(accounts.create_user_key(1, None, "bootstrap", NOW))
    asyncio.run(accounts.create_user_key(1, 1, "mine", NOW))
    _login(client)
    page = client.get("/account").text
    assert "bootstrap" in page and "project key" in page and "ada@example.com</td>" in page


def test_password_change_checks_the_current_one_and_ends_other_sessions() -> None:
    client, accounts, _ = _client()
    _login(client)
    other = TestClient(client.app, base_url="http://console.test")
    _login(other)
    assert len(accounts.sessions) == 2
    token = client.cookies.get("flagstaff_session") or ""
    form = {"csrf_token": csrf.csrf_token_for(token), "current_password": "wrong password!"}
    wrong = client.post("/account/password", data={**form, "new_password": "a new password 1"})
    assert wrong.status_code == 400 and "not right" in wrong.text
    form["current_password"] = PASSWORD
    weak = client.post("/account/password", data={**form, "new_password": "short"})
    assert weak.status_code == 400 and "at least 10" in weak.text
    no_csrf = client.post(
        "/account/password",
        data={"current_password": PASSWORD, "new_password": "a new password 1"},
    )
    assert no_csrf.status_code == 403
    done = client.post("/account/password", data={**form, "new_password": "a new password 1"})
    assert done.status_code == 200 and "1 other session(s) were logged out" in done.text
    assert len(accounts.sessions) == 1
    assert other.get("/feature_flags", follow_redirects=False).status_code == 303
    assert client.get("/feature_flags").status_code == 200
    client.cookies.clear()
    assert _login(client).status_code == 401
    assert _login(client, password="a new password 1").status_code == 303
