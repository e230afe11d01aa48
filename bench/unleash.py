"""The peer: self-hosted Unleash's ``/api/frontend`` with the same 50 flags as ``bench.flags_load``.

Unleash 7.5.1 is installed from npm into ``bench/unleash/node_modules`` (``npm ci`` on first
use; nothing of it is committed) and runs on Node with a fresh PostgreSQL database from
``tests/pg.py``. The benchmark's 50 PostHog flags (``bench.engine.build_definitions``) are
translated to Unleash's model: a condition set becomes a ``flexibleRollout`` strategy with the
same rollout, a person filter a constraint (``exact`` -> ``IN``, ``is_not`` -> ``NOT_IN``,
``icontains`` -> ``STR_CONTAINS``, ``gt``/``gte`` -> ``NUM_GT``/``NUM_GTE``, ``regex`` ->
``REGEX``, ``semver_gte`` -> ``SEMVER_GT``, ``is_date_after`` -> ``DATE_AFTER``, ``is_set`` ->
``NOT_IN ["-"]``), a cohort a segment (an OR cohort one strategy per branch), the group flag a
constraint on the company's seats, variants strategy variants with the same weights, and a
flag dependency an Unleash parent dependency. The frontend API evaluates every flag for the
context in the query (``userId`` and ``properties[...]``); Unleash keeps no person store, so
each request carries the person's properties, which is the work ``/flags`` does with a stored
person.

Run alone: ``python -m bench.unleash [--seconds 10] [--connections 32]``; ``bench.all`` runs it
in its table.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bench.engine import build_definitions, build_people
from bench.load import WrkResult, wrk

HERE = Path(__file__).parent / "unleash"
ADMIN_TOKEN = "*:*.flagstaff-bench-admin"
FRONTEND_TOKEN = "default:development.flagstaff-bench-frontend"
CONTEXT_FIELDS = (
    "email",
    "country",
    "plan",
    "age",
    "beta",
    "app_version",
    "signup",
    "name",
    "seats",
)


def ensure_installed() -> Path:
    """``npm ci`` the pinned Unleash once; returns its server entry point."""
    entry = HERE / "node_modules" / "unleash-server" / "dist" / "server.js"
    if not entry.exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True
        )
    return entry


def _constraint(prop: dict[str, Any]) -> dict[str, Any]:
    operator, value, key = prop.get("operator", "exact"), prop.get("value"), prop["key"]
    values = [str(v).lower() for v in value] if isinstance(value, list) else [str(value)]
    match operator:
        case "exact":
            return {"contextName": key, "operator": "IN", "values": values}
        case "is_not":
            return {"contextName": key, "operator": "NOT_IN", "values": values}
        case "icontains":
            return {
                "contextName": key,
                "operator": "STR_CONTAINS",
                "values": values,
                "caseInsensitive": True,
            }
        case "gt" | "gte":
            unleash = "NUM_GT" if operator == "gt" else "NUM_GTE"
            return {"contextName": key, "operator": unleash, "value": str(value)}
        case "regex":
            return {"contextName": key, "operator": "REGEX", "value": str(value)}
        case "semver_gte":
            return {"contextName": key, "operator": "SEMVER_GT", "value": str(value)}
        case "is_date_after":
            return {"contextName": key, "operator": "DATE_AFTER", "value": f"{value}T00:00:00.000Z"}
        case "is_set":
            return {"contextName": key, "operator": "NOT_IN", "values": ["-"]}
    raise ValueError(f"no Unleash translation for operator {operator!r}")


def _cohort_branches(cohort_id: int, cohorts: dict[str, dict[str, Any]]) -> list[list[dict]]:
    """A cohort's property group as OR-branches of AND-ed constraints (nested cohorts inlined)."""
    group = cohorts[str(cohort_id)]["filters"]["properties"]

    def branches(node: dict[str, Any]) -> list[list[dict]]:
        if "values" not in node:
            if node.get("type") == "cohort":
                return _cohort_branches(int(node["value"]), cohorts)
            return [[_constraint(node)]]
        parts = [branches(child) for child in node["values"]]
        if node.get("type") == "OR":
            return [branch for part in parts for branch in part]
        combined: list[list[dict]] = [[]]
        for part in parts:
            combined = [left + right for left in combined for right in part]
        return combined

    return branches(group)


def _ok(response: httpx.Response) -> None:
    if response.is_error:
        path = response.request.url.path
        raise RuntimeError(f"Unleash {path}: {response.status_code} {response.text}")


@dataclass
class UnleashFlag:
    name: str
    strategies: list[dict[str, Any]]
    parent: str | None


def translate(
    flag: dict[str, Any], cohorts: dict[str, dict[str, Any]], *, plain: bool = False
) -> UnleashFlag:
    """One flag in Unleash's model. ``plain``: only the cheap constraints (no regex
    constraint, no parent dependency), so Unleash does less than /flags: the comparison most
    favourable to it."""
    filters = flag["filters"]
    variants = (filters.get("multivariate") or {}).get("variants") or []
    payloads = filters.get("payloads") or {}
    strategy_variants = [
        {
            "name": v["key"],
            "weight": int(v["rollout_percentage"] * 10),
            "weightType": "variable",
            "stickiness": "userId",
            **(
                {"payload": {"type": "json", "value": payloads[v["key"]]}}
                if v["key"] in payloads
                else {}
            ),
        }
        for v in variants
    ]
    parent = None
    strategies = []
    for condition in filters["groups"]:
        rollout = condition.get("rollout_percentage")
        branches: list[list[dict]] = [[]]
        for prop in condition.get("properties") or []:
            if prop.get("type") == "flag":
                parent = None if plain else f"bench-flag-{prop['key']}"
            elif prop.get("type") == "cohort":
                options = _cohort_branches(int(prop["value"]), cohorts)
                branches = [left + right for left in branches for right in options]
            elif not (plain and prop.get("operator") == "regex"):
                branches = [[*branch, _constraint(prop)] for branch in branches]
        for constraints in branches:
            if plain:
                constraints = [c for c in constraints if c["operator"] != "REGEX"]
            strategies.append(
                {
                    "name": "flexibleRollout",
                    "constraints": constraints,
                    "parameters": {
                        "rollout": str(100 if rollout is None else rollout),
                        "stickiness": "userId",
                        "groupId": flag["key"],
                    },
                    "variants": strategy_variants,
                }
            )
    return UnleashFlag(flag["key"], strategies, parent)


class Unleash:
    """One Unleash server on a fresh PostgreSQL database, stopped by ``stop``."""

    def __init__(self, port: int = 4242) -> None:
        from tests.pg import new_database

        self.url = f"http://127.0.0.1:{port}"
        entry = ensure_installed()
        env = {
            **os.environ,
            "DATABASE_URL": new_database(),
            "DATABASE_SSL": "false",
            "PORT": str(port),
            "INIT_ADMIN_API_TOKENS": ADMIN_TOKEN,
            "INIT_FRONTEND_API_TOKENS": FRONTEND_TOKEN,
            "SEND_TELEMETRY": "false",
            "CHECK_VERSION": "false",
            "LOG_LEVEL": "error",
            "NODE_ENV": "production",
        }
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            ["node", str(entry)], cwd=HERE, env=env, stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("Unleash did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()

    def load(
        self,
        flags: list[dict[str, Any]],
        cohorts: dict[str, dict[str, Any]],
        *,
        plain: bool = False,
    ) -> None:
        admin = {"Authorization": ADMIN_TOKEN}
        with httpx.Client(base_url=self.url, headers=admin, timeout=30) as http:
            for name in CONTEXT_FIELDS:
                http.post("/api/admin/context", json={"name": name, "stickiness": False})
            base = "/api/admin/projects/default/features"
            translated = [translate(flag, cohorts, plain=plain) for flag in flags]
            for flag in translated:
                r = http.post(base, json={"name": flag.name})
                _ok(r)
                for strategy in flag.strategies:
                    r = http.post(
                        f"{base}/{flag.name}/environments/development/strategies", json=strategy
                    )
                    _ok(r)
            for flag in translated:
                if flag.parent is not None:
                    r = http.post(
                        f"{base}/{flag.name}/dependencies",
                        json={"feature": flag.parent, "enabled": True},
                    )
                    _ok(r)
                _ok(http.post(f"{base}/{flag.name}/environments/development/on"))


def frontend_paths(people: list[tuple[str, dict, dict[str, str]]]) -> list[str]:
    paths = []
    for distinct_id, properties, groups in people:
        query = [f"userId={quote(distinct_id)}"]
        context = dict(properties)
        if groups:
            context["seats"] = 25
        for key, value in context.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            query.append(f"properties%5B{key}%5D={quote(text)}")
        paths.append("/api/frontend?" + "&".join(query))
    return paths


def lua_get(paths: list[str], folder: Path) -> Path:
    """A wrk script that GETs the paths round-robin with the frontend token."""
    entries = ",\n".join(f'"{p}"' for p in paths)
    script = folder / f"unleash-{len(paths)}.lua"
    script.write_text(
        f"local paths = {{\n{entries}\n}}\n"
        "local n = 0\n"
        f'wrk.headers["Authorization"] = "{FRONTEND_TOKEN}"\n'
        "request = function()\n"
        "  n = n + 1\n"
        '  return wrk.format("GET", paths[(n % #paths) + 1])\n'
        "end\n"
    )
    return script


def measure(
    seconds: int, connections: int, persons: int = 10_000, *, plain: bool = False
) -> WrkResult:
    """Start Unleash with the 50 flags (``plain``: without regex constraints and parent
    dependencies, see :func:`translate`) and measure ``/api/frontend`` with wrk."""
    rng = random.Random(7)
    flags, cohorts = build_definitions(rng)
    people = build_people(rng, persons)
    server = Unleash()
    try:
        server.load(flags, cohorts, plain=plain)
        paths = frontend_paths(rng.sample(people, 2000))
        headers = {"Authorization": FRONTEND_TOKEN}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the frontend API refreshes its copy of the flags
            answer = httpx.get(server.url + paths[0], headers=headers).json()
            if answer["toggles"]:
                break
            time.sleep(0.5)
        with tempfile.TemporaryDirectory() as folder:
            script = lua_get(paths, Path(folder))
            wrk("warm-up", server.url + "/", seconds=5, connections=16, script=script)
            return wrk(
                "Unleash GET /api/frontend",
                server.url + "/",
                seconds=seconds,
                connections=connections,
                script=script,
            )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--plain", action="store_true", help="no regex, no dependencies")
    args = parser.parse_args()
    print(measure(args.seconds, args.connections, plain=args.plain).line())


if __name__ == "__main__":
    main()
