"""The accounts' pure parts: passwords, sessions, CSRF, throttling, roles, cookies, schemas."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from flagstaff.accounts import api_keys, cookies, csrf, passwords, roles, sessions, throttle, users
from flagstaff.accounts.records import ApiKeyInfo, LoginAttempt, Role, Session

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
STORE = Path(__file__).parents[2] / "src" / "flagstaff" / "store"


# passwords ---------------------------------------------------------------------------------


def test_password_hash_verifies_only_the_same_password() -> None:
    stored = passwords.hash_password("correct horse battery", FAST)
    assert stored.startswith("$argon2id$")
    assert "correct horse" not in stored
    assert passwords.verify_password(stored, "correct horse battery", FAST).ok
    assert not passwords.verify_password(stored, "correct horse batterY", FAST).ok
    assert not passwords.verify_password("not a hash", "x", FAST).ok


def test_hash_with_old_parameters_asks_for_a_rehash() -> None:
    stored = passwords.hash_password("correct horse battery", FAST)
    stronger = PasswordHasher(time_cost=2, memory_cost=16, parallelism=1)
    result = passwords.verify_password(stored, "correct horse battery", stronger)
    assert result.ok and result.new_hash is not None
    assert stronger.verify(result.new_hash, "correct horse battery")
    assert (
        passwords.verify_password(result.new_hash, "correct horse battery", stronger).new_hash
        is None
    )


def test_password_policy() -> None:
    assert passwords.password_problem("short") is not None
    assert passwords.password_problem(" " * 12) is not None
    assert passwords.password_problem("x" * 2000) is not None
    assert passwords.password_problem("long enough pass") is None


def test_email_normalised_and_checked() -> None:
    assert users.normalize_email("  Ada@Example.COM ") == "ada@example.com"
    assert users.email_problem("ada@example.com") is None
    for bad in ("", "ada", "ada@example", "a b@example.com", "x" * 250 + "@e.com"):
        assert users.email_problem(bad) is not None


# sessions ----------------------------------------------------------------------------------


def _session(new: sessions.NewSession, last_seen: int) -> Session:
    return Session(
        id=1,
        user_id=7,
        token_hash=new.token_hash,
        created_at_ms=new.created_at_ms,
        last_seen_ms=last_seen,
        expires_at_ms=new.expires_at_ms,
    )


def test_session_token_is_random_and_stored_hashed() -> None:
    a, b = sessions.start_session(0), sessions.start_session(0)
    assert a.token != b.token and len(a.token) >= 40
    assert a.token_hash == sessions.hash_session_token(a.token)
    assert a.token not in a.token_hash


def test_session_expiry_and_idle_timeout() -> None:
    policy = sessions.SessionPolicy(
        lifetime_ms=10_000, idle_timeout_ms=3_000, touch_interval_ms=500
    )
    new = sessions.start_session(1_000, policy)
    assert new.expires_at_ms == 11_000
    live = _session(new, last_seen=1_000)
    assert sessions.session_state(live, 3_999, policy) is sessions.SessionState.VALID
    assert sessions.session_state(live, 4_000, policy) is sessions.SessionState.IDLE
    recent = _session(new, last_seen=10_000)
    assert sessions.session_state(recent, 10_999, policy) is sessions.SessionState.VALID
    assert sessions.session_state(recent, 11_000, policy) is sessions.SessionState.EXPIRED
    assert not sessions.needs_touch(recent, 10_400, policy)
    assert sessions.needs_touch(recent, 10_500, policy)


# CSRF --------------------------------------------------------------------------------------


def test_csrf_token_is_bound_to_its_session() -> None:
    one, two = sessions.new_session_token(), sessions.new_session_token()
    token = csrf.csrf_token_for(one)
    assert csrf.csrf_valid(one, token)
    assert not csrf.csrf_valid(two, token)
    assert not csrf.csrf_valid(one, None)
    assert not csrf.csrf_valid(one, "")
    assert not csrf.csrf_valid(one, token[:-1] + ("0" if token[-1] != "0" else "1"))
    assert one not in token


def test_login_csrf_double_submit() -> None:
    value = csrf.new_login_csrf()
    assert csrf.login_csrf_valid(value, value)
    assert not csrf.login_csrf_valid(value, csrf.new_login_csrf())
    assert not csrf.login_csrf_valid(None, value)
    assert not csrf.login_csrf_valid(value, None)


def test_which_methods_need_csrf_and_origin_check() -> None:
    assert not csrf.needs_csrf("GET") and not csrf.needs_csrf("head")
    assert csrf.needs_csrf("POST") and csrf.needs_csrf("PATCH") and csrf.needs_csrf("DELETE")
    host = "flags.example.com"
    assert csrf.origin_allowed({"origin": "https://flags.example.com"}, host)
    assert not csrf.origin_allowed({"origin": "https://evil.example"}, host)
    assert not csrf.origin_allowed({"origin": "null"}, host)
    assert csrf.origin_allowed({"referer": "https://flags.example.com/flags/3"}, host)
    assert not csrf.origin_allowed({"referer": "https://evil.example/x"}, host)
    assert csrf.origin_allowed({}, host)


# throttling --------------------------------------------------------------------------------


def test_failures_per_email_block_then_slide_out() -> None:
    policy = throttle.ThrottlePolicy(
        window_ms=60_000, max_failures_per_email=3, max_failures_per_ip=100
    )
    t = throttle.LoginThrottle(policy)
    for i in range(3):
        assert t.check("a@x.io", "1.1.1.1", i * 1000).allowed
        t.record_failure("a@x.io", "1.1.1.1", i * 1000)
    blocked = t.check("a@x.io", "2.2.2.2", 5_000)
    assert not blocked.allowed and "account" in blocked.reason
    assert blocked.retry_after_s == 55  # the first failure (t=0) leaves the window at 60 s
    assert t.check("b@x.io", "1.1.1.1", 5_000).allowed  # other accounts are not blocked
    assert not t.check("a@x.io", "1.1.1.1", 59_999).allowed
    assert t.check("a@x.io", "1.1.1.1", 60_000).allowed


def test_failures_per_ip_block_every_account_from_that_address() -> None:
    policy = throttle.ThrottlePolicy(
        window_ms=60_000, max_failures_per_email=100, max_failures_per_ip=4
    )
    t = throttle.LoginThrottle(policy)
    for i in range(4):
        t.record_failure(f"user{i}@x.io", "9.9.9.9", 1000 + i)
    decision = t.check("new@x.io", "9.9.9.9", 2000)
    assert not decision.allowed and "address" in decision.reason
    assert t.check("new@x.io", "8.8.8.8", 2000).allowed


def test_success_clears_the_account_and_state_rebuilds_from_attempts() -> None:
    policy = throttle.ThrottlePolicy(
        window_ms=60_000, max_failures_per_email=2, max_failures_per_ip=3
    )
    attempts = [
        LoginAttempt("a@x.io", "1.1.1.1", 100, False),
        LoginAttempt("a@x.io", "1.1.1.1", 200, False),
        LoginAttempt("a@x.io", "1.1.1.1", 300, True),
        LoginAttempt("a@x.io", "1.1.1.1", 400, False),
    ]
    rebuilt = throttle.LoginThrottle.from_attempts(reversed(attempts), policy)
    assert rebuilt.check("a@x.io", "5.5.5.5", 500).allowed  # one failure since the success
    assert not rebuilt.check("z@x.io", "1.1.1.1", 500).allowed  # but 3 from that address
    assert rebuilt.check("z@x.io", "1.1.1.1", 100_000).allowed


# roles -------------------------------------------------------------------------------------


def _principal(role: Role, user_id: int | None = 1) -> roles.Principal:
    return roles.Principal(
        project_id=1, role=role, method=roles.AuthMethod.SESSION, user_id=user_id
    )


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        (Role.VIEWER, {roles.Action.VIEW}),
        (Role.EDITOR, {roles.Action.VIEW, roles.Action.EDIT, roles.Action.APPROVE}),
        (Role.ADMIN, set(roles.Action)),
    ],
)
def test_role_permissions(role: Role, allowed: set[roles.Action]) -> None:
    for action in roles.Action:
        problem = roles.permission_problem(_principal(role), action)
        assert (problem is None) == (action in allowed), (role, action)


def test_viewers_change_nothing_whatever_the_method() -> None:
    viewer = _principal(Role.VIEWER)
    for method in ("POST", "PATCH", "PUT", "DELETE"):
        assert roles.action_for_method(method) is roles.Action.EDIT
        assert "viewers" in (
            roles.permission_problem(viewer, roles.action_for_method(method)) or ""
        )
    assert roles.permission_problem(viewer, roles.action_for_method("GET")) is None


def test_approval_needs_a_second_person_and_keys_are_revoked_by_owner_or_admin() -> None:
    assert roles.can_approve(_principal(Role.EDITOR, 1), author_user_id=1) is not None
    assert roles.can_approve(_principal(Role.EDITOR, 2), author_user_id=1) is None
    assert roles.can_approve(_principal(Role.VIEWER, 2), author_user_id=1) is not None
    assert roles.can_revoke_key(_principal(Role.VIEWER, 5), key_user_id=5) is None
    assert roles.can_revoke_key(_principal(Role.EDITOR, 5), key_user_id=6) is not None
    assert roles.can_revoke_key(_principal(Role.ADMIN, 5), key_user_id=6) is None
    assert roles.parse_role("editor") is Role.EDITOR and roles.parse_role("owner") is None


# cookies and keys --------------------------------------------------------------------------


def test_session_cookie_attributes() -> None:
    plain = cookies.session_cookie("abc", 3600, secure=False)
    assert plain == "flagstaff_session=abc; Path=/; SameSite=Lax; Max-Age=3600; HttpOnly"
    assert cookies.session_cookie("abc", 3600, secure=True).endswith("; HttpOnly; Secure")
    cleared = cookies.clear_cookie(cookies.SESSION_COOKIE, secure=True)
    assert cleared.startswith("flagstaff_session=; ") and "Max-Age=0" in cleared
    with pytest.raises(ValueError):
        cookies.session_cookie("a;b", 1, secure=False)


def test_tls_detection_trusts_forwarded_proto_only_when_told() -> None:
    assert cookies.request_is_secure("https", {}, trust_forwarded=False)
    forwarded = {"x-forwarded-proto": "https"}
    assert not cookies.request_is_secure("http", forwarded, trust_forwarded=False)
    assert cookies.request_is_secure("http", forwarded, trust_forwarded=True)
    assert cookies.request_is_secure("http", {"x-forwarded-proto": "HTTPS, http"}, True)
    assert not cookies.request_is_secure("http", {"x-forwarded-proto": "http, https"}, True)


def test_key_prefix_last_used_and_listing() -> None:
    info = ApiKeyInfo(
        id=3,
        project_id=1,
        label="ci",
        prefix=api_keys.key_prefix("phx_abcdefghijkl"),
        mask="phx_...ijkl",
        created_at_ms=1_000,
        user_id=2,
    )
    assert info.prefix == "phx_abcd"
    assert api_keys.needs_last_used_update(info, 5_000)
    used = ApiKeyInfo(
        **{**{f: getattr(info, f) for f in info.__struct_fields__}, "last_used_ms": 5_000}
    )
    assert not api_keys.needs_last_used_update(used, 64_999)
    assert api_keys.needs_last_used_update(used, 65_000)
    listed = api_keys.key_json(used, lambda ms: f"t{ms}")
    assert listed["last_used_at"] == "t5000" and listed["revoked"] is False
    assert "secure_value" not in listed and "phx_abcdefghijkl" not in str(listed)


# the accounts migration ---------------------------------------------------------------------


def test_sqlite_accounts_migration_applies_after_the_existing_ones() -> None:
    db = sqlite3.connect(":memory:")
    for path in sorted((STORE / "sqlite" / "migrations").glob("*.sql")):
        db.executescript(path.read_text())
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    expected = {
        "users",
        "memberships",
        "sessions",
        "login_attempts",
        "activity_log",
        "feature_flag_versions",
    }
    assert expected <= tables
    columns = {r[1] for r in db.execute("PRAGMA table_info(personal_api_keys)")}
    assert {"user_id", "prefix", "last_used_ms", "revoked_at_ms"} <= columns
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO projects (uuid, name, api_token, created_at) VALUES ('u', 'p', 't', 'now')"
        )
        db.execute(
            "INSERT INTO users (email, password_hash, created_at_ms) VALUES ('a@x.io', 'h', 1)"
        )
        db.execute("INSERT INTO memberships VALUES (1, 1, 'owner', 1)")


def test_both_engines_accounts_migrations_create_the_same_tables() -> None:
    def names(text: str) -> set[str]:
        return {
            line.split()[2]
            for line in text.splitlines()
            if line.startswith(("CREATE TABLE", "CREATE INDEX"))
        }

    sqlite_text = (STORE / "sqlite" / "migrations" / "0010_accounts.sql").read_text()
    postgres_text = (STORE / "postgres" / "migrations" / "0010_accounts.sql").read_text()
    assert names(sqlite_text) == names(postgres_text)
