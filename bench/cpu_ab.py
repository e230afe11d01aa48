"""A/B of server variants by CPU time per request, robust to a shared machine.

Run: ``python -m bench.cpu_ab --variant asgi:FLAGSTAFF_INTERFACE=asgi --variant rsgi: [--rounds 3]
[--cold] [--routes /flags]``. A variant's environment may set ``PYTHONPATH`` to another
checkout's ``src`` to compare commits.

Every variant is a server (2 granian workers) started with its environment, loaded with the
50 flags of ``bench.engine`` and 10,000 persons. The rounds interleave the variants: each
round runs wrk against each variant's ``/flags`` (bodies over all persons), ``/i/v0/e/`` single
events and ``/batch/`` 100-event batches, and reads the CPU seconds (user + system, /proc)
the server's processes spent meanwhile. The figure quoted is the median over rounds of CPU
microseconds per request (per event for /batch/): unlike req/s it does not move when other
processes take the cores, so variants can be compared on a busy machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import httpx
from tests.server import PROJECT_TOKEN, Api, Server

from bench.all import _flags_bodies, _load_flags, scaled_definitions
from bench.engine import build_people
from bench.flags_load import _load_people
from bench.ingest_load import _script as ingest_script
from bench.load import CpuMeter, lua_post, start_server, wrk

ROUTES = ("/flags", "/i/v0/e/", "/batch/")


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    env = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, env


def _move_person_version(url: str) -> None:
    event = {
        "event": "$set",
        "distinct_id": "bench-cold",
        "properties": {"$set": {"n": time.time()}},
    }
    r = httpx.post(url + "/i/v0/e/", json={"api_key": PROJECT_TOKEN, **event})
    r.raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", action="append", required=True, help="name:ENV=V,ENV=V")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--persons", type=int, default=10_000)
    parser.add_argument(
        "--active",
        type=int,
        default=0,
        help="/flags bodies for only the first N persons (repeat visits: a warm cache)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="move the person version before each /flags run (a $set event), so each request "
        "of a run that does fewer requests than there are persons reads a person not cached",
    )
    args = parser.parse_args()
    routes = [r for r in args.routes.split(",") if r]
    variants = [_variant(v) for v in args.variant]
    flags, cohorts = scaled_definitions(50)
    people = build_people(random.Random(11), args.persons)
    bodies = _flags_bodies(people[: args.active or 20_000])
    servers: dict[str, tuple[Server, Path]] = {}
    try:
        for name, env in variants:
            srv, root = start_server(2, env)
            servers[name] = (srv, root)
            if "/flags" in routes:
                _load_flags(Api(srv.url), flags, cohorts)
                _load_people(srv.url, people)
        time.sleep(1.0)
        per_request: dict[tuple[str, str], list[float]] = {}
        rates: dict[tuple[str, str], list[float]] = {}
        failed: dict[tuple[str, str], int] = {}
        run_id = random.randrange(1, 30000)
        for round_no in range(args.rounds):
            order = variants if round_no % 2 == 0 else variants[::-1]
            for name, _env in order:
                srv, root = servers[name]
                assert srv.proc is not None
                for route in routes:
                    run_id += 1
                    if route == "/flags":
                        script = lua_post("/flags/?v=2", bodies, root)
                        url = srv.url + "/flags/?v=2"
                        per = 1
                    else:
                        per = 100 if route == "/batch/" else 1
                        script = ingest_script(root, route, per, run_id)
                        url = srv.url + route
                    if round_no == 0:
                        wrk("warm-up", url, seconds=1, connections=8, script=script)
                    if route == "/flags" and args.cold:
                        _move_person_version(srv.url)
                    meter = CpuMeter(srv.proc.pid)
                    meter.start()
                    result = wrk(
                        f"{name} {route}",
                        url,
                        seconds=args.seconds,
                        connections=args.connections,
                        script=script,
                    )
                    spent = meter.stop()
                    done = result.requests * per
                    cpu = spent["workers"] + spent["writer"]
                    per_request.setdefault((name, route), []).append(cpu / done * 1e6)
                    rates.setdefault((name, route), []).append(result.requests_per_s * per)
                    key = (name, route)
                    failed[key] = failed.get(key, 0) + result.errors + result.non_2xx
        print(f"\nCPU us per request (per event for /batch/), median of {args.rounds} rounds")
        print(f"{'variant':<12}" + "".join(f"{r:>34}" for r in routes))
        for name, _env in variants:
            cells = []
            for route in routes:
                runs = per_request[(name, route)]
                rate = statistics.median(rates[(name, route)])
                cells.append(
                    f"{statistics.median(runs):7.1f} us ({min(runs):.0f}-{max(runs):.0f})"
                    f" {rate:6.0f}/s"
                )
            print(f"{name:<12}" + "".join(f"{c:>34}" for c in cells))
        for (name, route), count in failed.items():
            if count:
                print(f"warning: {name} {route}: {count} failed requests (errors or non-2xx)")
    finally:
        for srv, _root in servers.values():
            srv.stop()


if __name__ == "__main__":
    main()
