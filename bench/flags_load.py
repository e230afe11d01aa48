"""/flags under load: 50 realistic flags, persons from a store of 100k, beside /_health.

Run: ``python -m bench.flags_load [--workers 2] [--persons 100000] [--seconds 10]``

Steps: start the real server (fresh data dir), create the benchmark's 3 cohorts and 50 flags
through the management API (``bench.engine.build_definitions``), ingest the persons' properties
and 50 companies through /batch/, then run wrk against /_health and /flags (bodies cycling
over 2,000 of the stored persons, half with a company group), at full speed and then paced to
about half the full rate to read the p99 there.
"""

from __future__ import annotations

import argparse
import random
import time

import httpx
import msgspec
from tests.server import PROJECT_TOKEN, Api

from bench.engine import build_definitions, build_people
from bench.load import lua_post, start_server, wrk

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--postgres", action="store_true", help="a fresh PostgreSQL database (tests/pg.py)"
    )
    args = parser.parse_args()
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
