"""/flags under load: 50 realistic flags, persons from a store of 100k, beside /_health.

Run: ``python -m bench.flags_load [--workers 2] [--persons 100000] [--seconds 10]``

``--uniform 10000,1000000`` instead compares store sizes in one run (issue 39): a server per
size, each on a copy of a data dir with the same 50 flags and that many persons
(``bench.cold_path.persons_data_dir``, built once and reused), rounds interleaving the sizes,
every request naming a person drawn uniformly at random from all of them (so at 1M persons
nearly every request is a person no cache holds, and at 10k most are repeats). It prints
each size's req/s, the server's CPU per request and RSS per process, and each size's rate
as a ratio to the first size's (``--rounds``, ``--postgres``: the persons copied into a fresh
PostgreSQL database per size; ``--by-set``: stored through ``/batch/`` by the server itself).

Steps: start the real server (fresh data dir), create the benchmark's 3 cohorts and 50 flags
through the management API (``bench.engine.build_definitions``), ingest the persons' properties
and 50 companies through /batch/, then run wrk against /_health and /flags (bodies cycling
over 2,000 of the stored persons, half with a company group), at full speed and then paced to
about half the full rate to read the p99 there.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import msgspec
from tests.server import DATABASE_URL_ENV, PROJECT_TOKEN, Api, Server

from bench.engine import build_definitions, build_people
from bench.load import CpuMeter, lua_post, start_server, wrk

_encode = msgspec.json.encode


def _load_definitions(api: Api, rng: random.Random) -> int:
    flags, cohorts = build_definitions(rng)
    for cid in sorted(cohorts, key=int):
        body = {"name": f"cohort {cid}", "filters": cohorts[cid]["filters"]}
        r = api.post("/api/projects/@current/cohorts/", json=body)
        assert r.status_code == 201 and r.json()["id"] == int(cid), r.text
    for flag in flags:
        r = api.post("/api/projects/@current/feature_flags/", json=flag)
        assert r.status_code == 201 and r.json()["id"] == flag["id"], r.text
    return len(flags)


def _load_people(url: str, people: list[tuple[str, dict, dict[str, str]]]) -> float:
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as http:
        companies = [
            {
                "event": "$groupidentify",
                "distinct_id": "bench",
                "properties": {
                    "$group_type": "company",
                    "$group_key": f"company-{n}",
                    "$group_set": {"seats": n % 40, "name": f"Company {n}"},
                },
            }
            for n in range(1, 51)
        ]
        http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": companies})
        for start in range(0, len(people), 1000):
            batch = [
                {"event": "$set", "distinct_id": did, "$set": props}
                for did, props, _ in people[start : start + 1000]
            ]
            r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
            assert r.status_code == 200, r.text
    return time.perf_counter() - started


def _uniform_server(
    persons: int, workers: int, env: dict[str, str], postgres_url: str | None, by_set: bool
) -> tuple[Server, Path]:
    """A server over ``persons`` stored persons (the data dir copied, or PostgreSQL's; with
    ``by_set`` a fresh data dir whose persons this server ingests through ``/batch/``)."""
    from bench.cold_path import PEOPLE_SEED, copy_data_dir

    root = Path(tempfile.mkdtemp(prefix="flagstaff-bench-"))
    if by_set:
        srv = Server(data_dir=root / "data", workers=workers, env=env).start(timeout=60)
        _load_definitions(Api(srv.url), random.Random(7))
        took = _load_people(srv.url, build_people(random.Random(PEOPLE_SEED), persons))
        print(f"{persons:,} persons stored through /batch/ in {took:.0f} s", flush=True)
        return srv, root
    if postgres_url is not None:
        env = {**env, DATABASE_URL_ENV: postgres_url}
        srv = Server(data_dir=root / "data", workers=workers, env=env)
    else:
        srv = Server(data_dir=copy_data_dir(persons, root), workers=workers, env=env)
    return srv.start(timeout=120), root


def uniform(args: argparse.Namespace) -> None:
    """Each size's /flags rate with every request a person drawn uniformly at random."""
    from bench.all import process_rss  # bench.all imports this module
    from bench.cold_path import PEOPLE_SEED, postgres_persons
    from bench.cpu_ab import _variant, spread_script

    sizes = [int(n) for n in args.uniform.split(",")]
    variants = [_variant(v) for v in args.variant or [":"]]
    runs = [(name, env, n) for name, env in variants for n in sizes]
    servers: dict[tuple[str, int], tuple[Server, Path, Path]] = {}
    rates: dict[tuple[str, int], list[float]] = {(v, n): [] for v, _, n in runs}
    cpu: dict[tuple[str, int], list[float]] = {(v, n): [] for v, _, n in runs}
    memory: dict[tuple[str, int], str] = {}
    databases = {n: postgres_persons(n) for n in sizes} if args.postgres else {}
    try:
        for name, env, n in runs:
            srv, root = _uniform_server(n, args.workers, env, databases.get(n), args.by_set)
            script = spread_script(build_people(random.Random(PEOPLE_SEED), n), root)
            servers[(name, n)] = (srv, root, script)
            wrk(
                "warm-up", srv.url + "/flags/?v=2", seconds=args.warm, connections=16, script=script
            )
        for round_no in range(args.rounds):
            for name, _, n in runs if round_no % 2 == 0 else runs[::-1]:
                srv, _, script = servers[(name, n)]
                assert srv.proc is not None
                meter = CpuMeter(srv.proc.pid)
                meter.start()
                result = wrk(
                    f"{name} /flags, {n:,} persons uniform",
                    srv.url + "/flags/?v=2",
                    seconds=args.seconds,
                    connections=args.connections,
                    script=script,
                )
                spent = meter.stop()
                assert not result.errors and not result.non_2xx, result.line()
                rates[(name, n)].append(result.requests_per_s)
                cpu[(name, n)].append(sum(spent.values()) / result.requests * 1e6)
                memory[(name, n)] = process_rss(srv.proc.pid)
                print(result.line(), flush=True)
        store = "PostgreSQL" if args.postgres else "SQLite"
        print(
            f"\n{store}, {args.workers} worker(s), wrk -t1 -c{args.connections} -d{args.seconds}s, "
            f"{args.rounds} rounds interleaved; median req/s, server CPU per request"
        )
        for name, _, n in runs:
            key = (name, n)
            rate = statistics.median(rates[key])
            base = statistics.median(rates[(name, sizes[0])])
            each = " / ".join(f"{r:,.0f}" for r in rates[key])
            print(
                f"{name:<8}{n:>10,} persons: {rate:8,.0f} req/s ({each}), "
                f"{statistics.median(cpu[key]):.0f} µs CPU, ratio {rate / base:.2f}"
            )
            print(f"{'':>20}{memory[key]}")
    finally:
        for srv, root, _ in servers.values():
            srv.stop()
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--postgres", action="store_true", help="a fresh PostgreSQL database (tests/pg.py)"
    )
    parser.add_argument("--uniform", help="store sizes to compare, e.g. 10000,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--variant",
        action="append",
        help="with --uniform: name:ENV=V,... (as bench.cpu_ab; PYTHONPATH=<tree>/src for A/B)",
    )
    parser.add_argument("--warm", type=int, default=3, help="seconds of warm-up per server")
    parser.add_argument(
        "--by-set",
        action="store_true",
        help="with --uniform on SQLite: each server ingests its persons through /batch/ $set "
        "events first (the ingest writer's memory as after real traffic; minutes at 1M)",
    )
    args = parser.parse_args()
    if args.uniform:
        uniform(args)
        return
    rng = random.Random(7)

    srv, root = start_server(args.workers, postgres=args.postgres)
    try:
        api = Api(srv.url)
        flag_count = _load_definitions(api, rng)
        people = build_people(rng, args.persons)
        took = _load_people(srv.url, people)
        print(f"store: {args.persons} persons loaded in {took:.1f} s, {flag_count} flags")
        time.sleep(0.5)

        sample = rng.sample(people, 2000)
        bodies = [
            _encode({"api_key": PROJECT_TOKEN, "distinct_id": did, "groups": groups})
            for did, _, groups in sample
        ]
        check = httpx.post(f"{srv.url}/flags/?v=2", content=bodies[0]).json()
        assert len(check["flags"]) == flag_count and not check["errorsWhileComputingFlags"]

        flags_script = lua_post("/flags/?v=2", bodies, root)
        wrk("warm-up", srv.url + "/flags/?v=2", seconds=2, connections=16, script=flags_script)
        health = wrk(
            "GET /_health", srv.url + "/_health", seconds=args.seconds, connections=args.connections
        )
        full = wrk(
            f"POST /flags ({flag_count} flags)",
            srv.url + "/flags/?v=2",
            seconds=args.seconds,
            connections=args.connections,
            script=flags_script,
        )
        # paced: each connection waits so the total lands near half the full rate
        # wrk waits delay() before each request of a connection: per connection that is one
        # request per (delay + latency); latency at half load is about a millisecond here.
        connections = 16
        target = full.requests_per_s / 2
        delay_ms = max(connections / target * 1000 - 1.0, 0.1)
        paced_script = lua_post("/flags/?v=2", bodies, root, delay_ms=delay_ms)
        half = wrk(
            "POST /flags at ~half rate",
            srv.url + "/flags/?v=2",
            seconds=args.seconds,
            connections=connections,
            script=paced_script,
        )

        store = "PostgreSQL" if args.postgres else "SQLite"
        print(f"server: granian, {args.workers} workers, {store}; wrk 1 thread, same machine")
        for result in (health, full, half):
            print(result.line())
        print(
            f"/flags / /_health throughput ratio: {full.requests_per_s / health.requests_per_s:.2f}"
        )
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
