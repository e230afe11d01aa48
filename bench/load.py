"""Shared pieces of the HTTP load benchmarks: a server, wrk runs, and their parsed figures.

The load generator is wrk (Debian package ``wrk``), run on the same machine as the server, so
every figure includes the generator's share of the two cores. Each benchmark measures the
service's cheapest endpoint (``/_health``) in the same run, and quotes ratios to it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.server import Server

WRK_THREADS = 1


@dataclass
class WrkResult:
    label: str
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    non_2xx: int
    requests: int = 0
    """Requests completed in the run (wrk's "N requests in ...")."""

    def line(self) -> str:
        return (
            f"{self.label:<34} {self.requests_per_s:>10,.0f} req/s   p50 {self.p50_ms:6.2f} ms"
            f"   p99 {self.p99_ms:7.2f} ms   errors {self.errors + self.non_2xx}"
        )


def require_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("bench: wrk is missing: apt-get install wrk")
    return path


def _ms(value: str, unit: str) -> float:
    factor = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    return float(value) * factor


def wrk(
    label: str,
    url: str,
    *,
    seconds: int,
    connections: int,
    script: Path | None = None,
) -> WrkResult:
    cmd = [
        require_wrk(),
        f"-t{WRK_THREADS}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "--timeout",
        "10s",
    ]
    if script is not None:
        cmd += ["-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    p50 = _ms(*re.match(r"([\d.]+)(\w+)", lat["50"]).groups())  # type: ignore[union-attr]
    p99 = _ms(*re.match(r"([\d.]+)(\w+)", lat["99"]).groups())  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    return WrkResult(
        label,
        rps,
        p50,
        p99,
        errors,
        int(non2xx.group(1)) if non2xx else 0,
        int(done.group(1)) if done else 0,
    )


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            direct = [int(c) for c in f.read().split()]
    except FileNotFoundError:
        return []
    return direct + [g for c in direct for g in _children(c)]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def postmaster_of(url: str) -> int:
    """The PostgreSQL server's postmaster: the parent of a backend of ``url``."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return _parent(int(await conn.fetchval("SELECT pg_backend_pid()")))
    finally:
        await conn.close()


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _write_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage (``write_bytes`` of /proc/pid/io)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except (FileNotFoundError, PermissionError):
        pass
    return 0


class CpuMeter:
    """CPU seconds (user + system, from /proc) that the server's processes spend between
    ``start`` and ``stop``, by role: the SQLite ingest writer or the HTTP workers; and the
    bytes each role wrote to storage (``written``, after ``stop``)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._before: dict[int, float] = {}
        self._written_before: dict[int, int] = {}
        self.written: dict[str, int] = {}

    def _roles(self) -> dict[int, str]:
        roles = {}
        for pid in _children(self.server_pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except FileNotFoundError:
                continue
            roles[pid] = "writer" if b"sqlite.ingestd" in cmd else "workers"
        return roles

    def start(self) -> None:
        roles = self._roles()
        self._before = {pid: _cpu_seconds(pid) for pid in roles}
        self._written_before = {pid: _write_bytes(pid) for pid in roles}

    def stop(self) -> dict[str, float]:
        spent: dict[str, float] = {"writer": 0.0, "workers": 0.0}
        self.written = {"writer": 0, "workers": 0}
        for pid, role in self._roles().items():
            spent[role] += _cpu_seconds(pid) - self._before.get(pid, 0.0)
            self.written[role] += _write_bytes(pid) - self._written_before.get(pid, 0)
        return spent


def lua_post(
    path: str,
    bodies: list[bytes],
    folder: Path,
    *,
    delay_ms: float = 0.0,
    headers: dict[str, str] | None = None,
    zipf: float | None = None,
) -> Path:
    """A wrk script that POSTs the given bodies round-robin, or drawn with Zipf weights
    (``zipf`` = s: the body of rank r with weight 1 / r**s, how often people come back: a
    few very often, most rarely), optionally with a pause and more request headers."""
    entries = ",\n".join("[==[" + b.decode() + "]==]" for b in bodies)
    pick = "bodies[(n % #bodies) + 1]"
    draw = ""
    if zipf is not None:
        # Cumulative weights built once per thread; each request draws by binary search.
        draw = (
            "local cum = {}\nlocal total = 0\n"
            f"for r = 1, #bodies do total = total + 1 / r ^ {zipf}; cum[r] = total end\n"
            "math.randomseed(7)\n"
            "local function draw()\n"
            "  local u = math.random() * total\n"
            "  local lo, hi = 1, #cum\n"
            "  while lo < hi do\n"
            "    local mid = math.floor((lo + hi) / 2)\n"
            "    if cum[mid] < u then lo = mid + 1 else hi = mid end\n"
            "  end\n"
            "  return bodies[lo]\n"
            "end\n"
        )
        pick = "draw()"
    delay = f"function delay() return {delay_ms} end\n" if delay_ms else ""
    extra = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in (headers or {}).items())
    script = folder / f"post-{abs(hash(path))}-{len(bodies)}-{zipf or 0}.lua"
    script.write_text(
        f"local bodies = {{\n{entries}\n}}\n" + draw + "local n = 0\n"
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n' + extra + "request = function()\n"
        "  n = n + 1\n"
        f'  return wrk.format(nil, "{path}", nil, {pick})\n'
        "end\n" + delay
    )
    return script


def start_server(
    workers: int, env: dict[str, str] | None = None, *, postgres: bool = False
) -> tuple[Server, Path]:
    """A server on a fresh data dir, or on a fresh PostgreSQL database from tests/pg.py."""
    root = Path(tempfile.mkdtemp(prefix="flagstaff-bench-"))
    env = dict(env or {})
    if postgres:
        from tests.pg import new_database

        env["FLAGSTAFF_DATABASE_URL"] = new_database()
    srv = Server(data_dir=root / "data", workers=workers, env=env).start(timeout=60)
    return srv, root
