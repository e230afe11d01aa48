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

``--persons 1000000`` stores the persons beyond the first 10,000 with ``bench.prefill`` (as
``bench.all --scaling`` does); ``--spread`` makes the ``/flags`` bodies name persons drawn at
random from all of them (generated in wrk's Lua, groups as stored); ``--pss`` prints each
variant's memory per process and the node's PSS after the rounds. The memory of SQLite's map
at 1M persons: ``python -m bench.cpu_ab --persons 1000000 --spread --pss --routes /flags
--warm 60 --variant mmap256:FLAGSTAFF_SQLITE_MMAP_MB=256 --variant off:FLAGSTAFF_SQLITE_MMAP_MB=0``
(``--alongside 2`` adds a trickle of events during the /flags runs, so the ingest writer's
commits keep resetting the workers' page caches, as on a node that also ingests).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import threading
import time
from pathlib import Path

import httpx
from tests.server import PROJECT_TOKEN, Api, Server

from bench.all import _flags_bodies, _load_flags, _people_loaded, process_rss, scaled_definitions
from bench.engine import build_people
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


def spread_script(people: list[tuple[str, dict, dict[str, str]]], folder: Path) -> Path:
    """A wrk script POSTing ``/flags`` for persons drawn at random from all of ``people``
    (``person-N``, with the company group each has), each thread with its own seed."""
    companies = "".join(
        chr(65 + int(groups["company"].removeprefix("company-"))) if groups else "A"
        for _, _, groups in people
    )
    assert all(did == f"person-{n}" for n, (did, _, _) in enumerate(people))
    script = folder / f"flags-spread-{len(people)}.lua"
    script.write_text(
        f"local companies = [==[{companies}]==]\n"
        f'local head = \'{{"api_key":"{PROJECT_TOKEN}","distinct_id":"person-\'\n'
        "local seeded = false\n"
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        "request = function()\n"
        "  if not seeded then math.randomseed(os.time() + math.floor(os.clock() * 1e6)); "
        "seeded = true end\n"
        f"  local n = math.random(0, {len(people) - 1})\n"
        "  local c = string.byte(companies, n + 1) - 65\n"
        "  local groups = '{}'\n"
        "  if c > 0 then groups = '{\"company\":\"company-' .. c .. '\"}' end\n"
        "  local body = head .. n .. '\",\"groups\":' .. groups .. '}'\n"
        '  return wrk.format(nil, "/flags/?v=2", nil, body)\n'
        "end\n"
    )
    return script


def _events_alongside(
    url: str, folder: Path, args: argparse.Namespace, run_id: int
) -> threading.Thread:
    """Paced single events for the length of a /flags run, in a thread."""
    script = ingest_script(folder, "/i/v0/e/", 1, run_id + 50_000)
    paced = folder / "ingest-alongside.lua"
    paced.write_text(script.read_text() + "\nfunction delay() return 10 end\n")
    thread = threading.Thread(
        target=wrk,
        args=("events alongside", url + "/i/v0/e/"),
        kwargs={"seconds": args.seconds, "connections": args.alongside, "script": paced},
    )
    thread.start()
    return thread


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
    parser.add_argument(
        "--zipf",
        type=float,
        default=None,
        help="/flags bodies drawn with Zipf weights of exponent S (repeat visits), not in turn",
    )
    parser.add_argument("--spread", action="store_true", help="/flags over all persons at random")
    parser.add_argument("--pss", action="store_true", help="memory per process after the rounds")
    parser.add_argument("--warm", type=int, default=1, help="seconds of warm-up per route")
    parser.add_argument(
        "--alongside",
        type=int,
        default=0,
        help="during /flags runs, N connections each POSTing a single event every 10 ms (the "
        "ingest writer's commits reset the workers' SQLite page caches); their CPU is counted",
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
                _people_loaded(srv, people)
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
                        script = (
                            spread_script(people, root)
                            if args.spread
                            else lua_post("/flags/?v=2", bodies, root, zipf=args.zipf)
                        )
                        url = srv.url + "/flags/?v=2"
                        per = 1
                    else:
                        per = 100 if route == "/batch/" else 1
                        script = ingest_script(root, route, per, run_id)
                        url = srv.url + route
                    if round_no == 0:
                        wrk("warm-up", url, seconds=args.warm, connections=8, script=script)
                    if route == "/flags" and args.cold:
                        _move_person_version(srv.url)
                    events = None
                    if route == "/flags" and args.alongside:
                        events = _events_alongside(srv.url, root, args, run_id)
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
                    if events is not None:
                        events.join()
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
        if args.pss:
            print("\nMemory per process (MB) after the rounds")
            for name, (srv, _root) in servers.items():
                assert srv.proc is not None
                print(f"{name:<12} {process_rss(srv.proc.pid)}")
    finally:
        for srv, root in servers.values():
            srv.stop()
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
