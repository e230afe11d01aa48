"""Settings from command-line flags and ``FLAGSTAFF_*`` environment variables, validated once.

Workers are separate processes started by the HTTP server, so the CLI hands settings to them
through the environment: :meth:`Settings.to_env` writes them, :meth:`Settings.from_env` reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flagstaff.accounts.oidc import SsoConfig, parse_domains, parse_role_map
from flagstaff.activity.webhooks import RETRY_DELAYS_S, parse_retry_delays
from flagstaff.store.sqlite.person_cache import DEFAULT_PERSON_CACHE_MB
from flagstaff.store.sqlite.person_version import DEFAULT_CONTEXT_CACHE_MB
from flagstaff.store.sqlite.writer import DEFAULT_MMAP_MB, MAX_MMAP_MB

if TYPE_CHECKING:
    from flagstaff.stream.client import StreamSpec

ENV_PREFIX = "FLAGSTAFF_"


class ConfigError(ValueError):
    """A setting has a value that cannot be used."""


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a boolean, got {raw!r}")


def _parse_int(name: str, raw: str, minimum: int = 0) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be >= {minimum}, got {value}")
    return value


def _parse_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be > 0, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the service; see the configuration reference in the README."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    data_dir: Path = field(default_factory=lambda: Path("flagstaff-data"))
    database_url: str | None = None
    log_level: str = "info"
    access_log: bool = False
    """One JSON line per request (method, path, status, duration, request id)."""
    trust_forwarded_for: bool = True
    geoip_path: str | None = None
    geoip_disable: bool = False
    body_limit: int = 20 * 1024 * 1024
    flag_quota_per_minute: int = 0
    event_quota_per_minute: int = 0
    init_project_token: str | None = None
    init_personal_api_key: str | None = None
    init_admin_email: str | None = None
    init_admin_password: str | None = None
    """With ``init_admin_email``: the console's first admin, created at start if absent."""
    trust_forwarded_proto: bool = False
    """Behind a TLS-terminating proxy: believe its ``X-Forwarded-Proto`` (Secure cookies)."""
    definitions_refresh_seconds: float = 0.25
    max_connections: int = 10_000
    """Connections one worker holds open at once (granian's ``backpressure``); more wait in the
    listen backlog. Lowered at start to what the open-files limit allows."""
    max_uploads: int = 1024
    """Requests of one worker waiting for body bytes at once; beyond, the idlest is shed."""
    header_timeout_ms: int = 5000
    """Time a client has to send a request's headers, from its connection or its previous
    answer (so also how long an idle keep-alive connection stays open)."""
    body_timeout_seconds: float = 10.0
    """Longest wait for the next piece of a request body before answering 408."""
    shutdown_grace_seconds: float = 1.0
    """After SIGTERM, how long a worker keeps answering (each answer closing its connection)
    before it stops accepting; see :mod:`flagstaff.server.draining`."""
    shutdown_timeout_seconds: int = 30
    """After SIGTERM, the longest wait for a worker's requests in flight before it is killed."""
    memory_budget_mb: int = 256
    """Memory one worker may spend decoding large bodies at once; beyond it 503 + Retry-After."""
    sqlite_mmap_mb: int = DEFAULT_MMAP_MB
    """How much of the SQLite file each connection maps into memory; 0 (the default) reads
    pages through SQLite's own page cache instead (``store.sqlite.writer.READ_CACHE_KB`` and
    ``WRITE_CACHE_KB``)."""
    flags_answer_cache_mb: int = 16
    """Encoded /flags answers each worker keeps for repeated requests (SQLite store; see
    ``server/answers.py``), the least recently used dropped first; 0 turns the cache off."""
    flag_context_cache_mb: int = DEFAULT_CONTEXT_CACHE_MB
    """Stored persons and groups each worker keeps for /flags while nothing changes them
    (SQLite store; estimated from their JSON), the least recently used dropped first; 0 reads
    them every time."""
    person_cache_mb: int = DEFAULT_PERSON_CACHE_MB
    """Persons the SQLite ingest writer keeps in memory (estimated); past it, it starts over
    and reads them again as events name them."""
    ingest_socket: str | None = None
    """Set by ``flagstaff serve``: the Unix socket of the SQLite ingest writer process."""
    disk_reserve_mb: int | None = None
    """Free space (MB) kept on the SQLite store's volume: below it ingestion is refused with
    503. None: min(1 GB, 5% of the volume); 0: no reserve. See ``server/disk.py``."""
    retention_check_seconds: float = 15.0
    """How often event retention looks for expired events (and for changed settings)."""
    guardrail_check_seconds: float = 30.0
    """How often a worker judges the guardrail metrics of running experiments (a breach is
    reported within two of these of the data that shows it, see server/guardrail_watch.py)."""
    webhook_retry_delays: str | None = None
    """Seconds before each retry of a failed webhook delivery, comma separated (default
    10,60,300,1800,7200,21600); fewer numbers, fewer retries."""
    stream_url: str | None = None
    """NATS servers (``nats://h1:4222,nats://h2:4222``): capture publishes accepted events to a
    replicated JetStream stream instead of writing them; ``flagstaff consume`` applies them
    to PostgreSQL (see :mod:`flagstaff.stream`). Needs a PostgreSQL ``database_url``."""
    stream_shards: int = 8
    """Subjects the stream's events are spread over by a hash of the distinct id: the most
    consumers that can work at once."""
    stream_replicas: int = 0
    """Copies of the stream; 0 chooses 3 when the cluster has 3 or more servers, else 1."""
    stream_publish_timeout: float = 5.0
    """Seconds capture waits for JetStream's acknowledgement before answering 503."""
    stream_lease_seconds: float = 6.0
    """How long a consumer's claim on a shard lasts without renewal: the takeover delay
    after a consumer dies."""
    stream_batch: int = 2000
    """Messages a consumer reads from one shard per PostgreSQL transaction at most."""
    stream_fetch_wait: float = 0.5
    """Seconds a consumer's open pull on a shard lasts before it is renewed. Not a delay: a
    message is delivered as soon as it is published (the pull returns at once)."""
    public_url: str | None = None
    """The console's own address as people reach it (``https://flags.example.com``); single
    sign-on's redirect URI is ``<public_url>/login/oidc/callback``."""
    oidc_issuer: str | None = None
    """Single sign-on's OpenID Connect provider, found through its
    ``/.well-known/openid-configuration``. Unset: password login only."""
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_client_secret_file: str | None = None
    """A file holding the client secret (instead of ``oidc_client_secret``)."""
    oidc_scopes: str = "openid email profile"
    oidc_groups_claim: str = "groups"
    oidc_role_map: str | None = None
    """Groups to roles: ``flag-admins=admin,flag-editors=editor,*=viewer``; ``*`` is anyone the
    provider authenticates; without it a person in no listed group is refused."""
    oidc_allowed_domains: str | None = None
    """Comma-separated email domains allowed to sign in (their email must be verified)."""
    oidc_only: bool = False
    """Password login off, except for users made with ``flagstaff user create --break-glass``."""
    oidc_name: str = "single sign-on"
    """The provider's name on the login page's button ("Sign in with ...")."""
    oidc_session_hours: float = 12.0
    """The longest an SSO session lasts (it ends with the ID token if that comes first)."""
    oidc_project: int | None = None
    """The project whose roles the role map gives; unset: the first project."""

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "flagstaff.sqlite3"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Read settings from the environment; keyword arguments that are not None win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _convert(f.name, f.type, raw)
        for key, value in overrides.items():
            if value is not None:
                values[key] = value
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if "/" in self.host or not self.host.strip():
            raise ConfigError(
                f"host (FLAGSTAFF_HOST, --host) is the address to listen on, such as 127.0.0.1 "
                f"or 0.0.0.0, not a URL: got {self.host!r}"
            )
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be between 1 and 65535, got {self.port}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if self.log_level not in {"debug", "info", "warning", "error"}:
            raise ConfigError(
                f"log level must be debug, info, warning or error, got {self.log_level!r}"
            )
        if self.database_url is not None and not self.database_url.startswith(
            ("postgres://", "postgresql://", "sqlite://")
        ):
            raise ConfigError("database url must start with postgresql:// or sqlite://")
        if self.max_connections < 16:
            raise ConfigError(f"max connections must be at least 16, got {self.max_connections}")
        if self.max_uploads < 16:
            raise ConfigError(f"max uploads must be at least 16, got {self.max_uploads}")
        if not 100 <= self.header_timeout_ms <= 60_000:
            raise ConfigError("header timeout must be between 100 and 60000 ms")
        if self.shutdown_timeout_seconds < 1:
            raise ConfigError("shutdown timeout must be at least 1 second")
        if self.memory_budget_mb < 16:
            raise ConfigError("memory budget must be at least 16 MB")
        if not 0 <= self.sqlite_mmap_mb <= MAX_MMAP_MB:
            raise ConfigError(
                f"sqlite mmap must be between 0 and {MAX_MMAP_MB} MB, got {self.sqlite_mmap_mb}"
            )
        for name in ("flag_context_cache_mb", "person_cache_mb"):
            if not 0 <= getattr(self, name) <= 65536:
                raise ConfigError(
                    f"{name.removesuffix('_mb').replace('_', ' ')} must be between 0 and "
                    f"65536 MB, got {getattr(self, name)}"
                )
        if not 0 <= self.flags_answer_cache_mb <= 4096:
            raise ConfigError(
                "flags answer cache must be between 0 and 4096 MB, "
                f"got {self.flags_answer_cache_mb}"
            )
        if self.body_limit < 1024:
            raise ConfigError("body limit must be at least 1024 bytes")
        if self.stream_url is not None:
            if not (self.database_url or "").startswith(("postgres://", "postgresql://")):
                raise ConfigError("the stream (--stream-url) needs a PostgreSQL database url")
            if not all(u.strip().startswith(("nats://", "tls://")) for u in self.stream_urls):
                raise ConfigError("stream url must be nats://host:port, comma separated")
            if not 1 <= self.stream_shards <= 1024:
                raise ConfigError("stream shards must be between 1 and 1024")
            if not 0 <= self.stream_replicas <= 5:
                raise ConfigError("stream replicas must be between 0 (automatic) and 5")
            if self.stream_batch < 1:
                raise ConfigError("stream batch must be at least 1")
            if not 0.01 <= self.stream_fetch_wait <= 60:
                raise ConfigError("stream fetch wait must be between 0.01 and 60 seconds")
        if self.oidc_issuer is not None:
            self.sso_config()
        if self.webhook_retry_delays is not None:
            try:
                parse_retry_delays(self.webhook_retry_delays)
            except ValueError as exc:
                raise ConfigError(f"webhook retry delays: {exc}") from None

    @property
    def stream_urls(self) -> list[str]:
        """The NATS server URLs of ``stream_url``."""
        return [u.strip() for u in (self.stream_url or "").split(",") if u.strip()]

    def stream_spec(self) -> StreamSpec:
        """The stream these settings name, for capture's publisher and ``flagstaff consume``."""
        from flagstaff.stream.client import StreamSpec  # the NATS client, only when streaming

        return StreamSpec(
            urls=self.stream_urls,
            shards=self.stream_shards,
            replicas=self.stream_replicas,
            publish_timeout=self.stream_publish_timeout,
            lease_seconds=self.stream_lease_seconds,
            batch=self.stream_batch,
            fetch_wait=self.stream_fetch_wait,
        )

    @property
    def retry_delays_s(self) -> tuple[float, ...]:
        """The webhook retry schedule: the configured one, else the default."""
        if self.webhook_retry_delays is None:
            return RETRY_DELAYS_S
        return parse_retry_delays(self.webhook_retry_delays)

    def sso_config(self) -> SsoConfig | None:
        """Single sign-on's checked settings, or None when no provider is set."""
        if self.oidc_issuer is None:
            return None
        issuer = self.oidc_issuer.strip().rstrip("/")
        if not web_url(issuer, allow_path=True):
            raise ConfigError(
                f"FLAGSTAFF_OIDC_ISSUER must be an https URL (http only on localhost), got "
                f"{self.oidc_issuer!r}"
            )
        public_url = (self.public_url or "").strip().rstrip("/")
        if not web_url(public_url, allow_path=False, allow_http=True):
            raise ConfigError(
                "single sign-on needs FLAGSTAFF_PUBLIC_URL, the console's address such as "
                f"https://flags.example.com (no path), got {self.public_url!r}"
            )
        if not self.oidc_client_id:
            raise ConfigError("single sign-on needs FLAGSTAFF_OIDC_CLIENT_ID")
        if self.oidc_client_secret and self.oidc_client_secret_file:
            raise ConfigError(
                "set FLAGSTAFF_OIDC_CLIENT_SECRET or FLAGSTAFF_OIDC_CLIENT_SECRET_FILE, not both"
            )
        secret = self.oidc_client_secret or ""
        if self.oidc_client_secret_file:
            try:
                secret = Path(self.oidc_client_secret_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"FLAGSTAFF_OIDC_CLIENT_SECRET_FILE: {exc}") from None
        if not secret:
            raise ConfigError(
                "single sign-on needs FLAGSTAFF_OIDC_CLIENT_SECRET or ..._SECRET_FILE"
            )
        try:
            role_map = parse_role_map(self.oidc_role_map or "")
        except ValueError as exc:
            raise ConfigError(f"FLAGSTAFF_OIDC_ROLE_MAP: {exc}") from None
        scopes = " ".join((self.oidc_scopes or "").split())
        if "openid" not in scopes.split():
            raise ConfigError("FLAGSTAFF_OIDC_SCOPES must include openid")
        if not 0 < self.oidc_session_hours <= 24 * 30:
            raise ConfigError("FLAGSTAFF_OIDC_SESSION_HOURS must be between 0 and 720")
        return SsoConfig(
            issuer=issuer,
            client_id=self.oidc_client_id,
            client_secret=secret,
            public_url=public_url,
            role_map=role_map,
            scopes=scopes,
            groups_claim=(self.oidc_groups_claim or "groups").strip(),
            allowed_domains=parse_domains(self.oidc_allowed_domains),
            only=self.oidc_only,
            name=(self.oidc_name or "single sign-on").strip()[:80],
            session_hours=self.oidc_session_hours,
            project_id=self.oidc_project,
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes :meth:`from_env` rebuild these settings in a worker."""
        env: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            env[ENV_PREFIX + f.name.upper()] = str(value)
        return env


def secure_data_dir(path: Path) -> None:
    """Create the data dir readable by this user only (0700), its files 0600, and make every
    file the service creates from now on (databases, journals, sockets) private too."""
    os.umask(0o077)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    for child in path.iterdir():
        if child.is_file():
            child.chmod(0o600)


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def web_url(url: str, *, allow_path: bool, allow_http: bool = False) -> bool:
    """An absolute http(s) URL with a host, no query or fragment; http only for loopback hosts
    unless ``allow_http`` (a console reached over plain http on a private network)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return False
    if parts.scheme == "http" and not allow_http and parts.hostname not in _LOOPBACK:
        return False
    if parts.query or parts.fragment or parts.username:
        return False
    return allow_path or parts.path in ("", "/")


def _convert(name: str, annotation: Any, raw: str) -> Any:
    kind = str(annotation)
    if kind == "bool":
        return _parse_bool(name, raw)
    if kind in ("int", "int | None"):
        return _parse_int(name, raw)
    if kind == "float":
        return _parse_float(name, raw)
    if kind == "Path":
        return Path(raw)
    return raw or None
