"""OFREP against /flags in one run: one flag, and every flag, under wrk.

Run: ``python -m bench.ofrep [--workers 2] [--persons 20000] [--seconds 5] [--postgres]``

Steps: the real server (fresh data dir or PostgreSQL database) gets bench.flags_load's 50 flags
and 3 cohorts and ``--persons`` stored persons with 50 companies; wrk then posts bodies cycling
over 2,000 of the stored persons (half with a company group) to four endpoints:

- one flag: ``POST /flags?v=2`` with ``flag_keys_to_evaluate`` naming a multivariate flag
  (variant split, person property, payload) against ``POST /ofrep/v1/evaluate/flags/<key>``;
- every flag: ``POST /flags?v=2`` against ``POST /ofrep/v1/evaluate/flags``.

Each pair runs ``--rounds`` times in the order A B B A, after a warm-up of each endpoint
(the single endpoint's until it records almost no new reads: ``server/flag_reads.py``
records a person's first read of a flag on each worker; the reads a run still records are
printed beside it); the
ratios compare the mean rates and the mean server CPU time per request (workers and the
SQLite writer; steadier than the rate on a shared machine). The goal: OFREP within 10% of
/flags.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import httpx
import msgspec
from tests.server import PROJECT_TOKEN, Api

from bench.engine import build_people
from bench.flags_load import _load_definitions, _load_people
from bench.load import CpuMeter, WrkResult, lua_post, start_server, wrk

_encode = msgspec.json.encode
AUTH = {"Authorization": f"Bearer {PROJECT_TOKEN}"}


def _one_flag_key(url: str) -> str:
    """The first multivariate flag: what an experiment's read looks like."""
    r = Api(url).get("/api/projects/@current/feature_flags/?limit=100")
    flags = sorted(r.json()["results"], key=lambda f: f["id"])
    return next(f["key"] for f in flags if (f["filters"].get("multivariate") or {}).get("variants"))


def _events_stored(url: str) -> int:
    """flagstaff_events_ingested_total (every worker's, as of their last metrics snapshot)."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("flagstaff_events_ingested_total "):
            return int(float(line.split()[1]))
    return 0


class Run:
    """A wrk run, the server's CPU time per request in it (workers and SQLite writer: on a
    shared machine the CPU cost of a request varies less than the rate), and the events the
    run stored (first reads of the single endpoint)."""

    def __init__(self, result: WrkResult, cpu_seconds: float, events: int) -> None:
        self.result = result
        self.cpu_us = cpu_seconds / max(result.requests, 1) * 1e6
        self.events = events

    def line(self) -> str:
        return (
            f"{self.result.line()}   cpu {self.cpu_us:6.0f} us/req   reads recorded {self.events}"
        )


def _pair(
    meter: CpuMeter,
    url: str,
    root: Path,
    label: str,
    flags: tuple[str, list[bytes]],
    ofrep: tuple[str, list[bytes]],
    seconds: int,
    connections: int,
    rounds: int,
) -> tuple[list[Run], list[Run]]:
    flags_script = lua_post(flags[0], flags[1], root)
    ofrep_script = lua_post(ofrep[0], ofrep[1], root, headers=AUTH)
    wrk("warm-up", url + flags[0], seconds=4, connections=16, script=flags_script)
    for _ in range(10):  # until (nearly) every person's read is recorded on every worker
        before = _events_stored(url)
        warm = wrk("warm-up", url + ofrep[0], seconds=4, connections=16, script=ofrep_script)
        time.sleep(1.1)  # the workers' metrics snapshots catch up
        if _events_stored(url) - before <= warm.requests // 200:
            break
    runs: tuple[list[Run], list[Run]] = ([], [])
    for which in (0, 1, 1, 0) * rounds:
        path, script = (flags[0], flags_script) if which == 0 else (ofrep[0], ofrep_script)
        name = f"{'/flags' if which == 0 else 'OFREP'} {label}"
        events = _events_stored(url)
        meter.start()
        result = wrk(name, url + path, seconds=seconds, connections=connections, script=script)
        spent = meter.stop()
        time.sleep(1.1)
        events = _events_stored(url) - events
        assert result.errors + result.non_2xx == 0, result.line()
        runs[which].append(Run(result, spent["workers"] + spent["writer"], events))
    return runs


def _mean_rate(runs: list[Run]) -> float:
    return sum(r.result.requests_per_s for r in runs) / len(runs)


def _mean_cpu(runs: list[Run]) -> float:
    return sum(r.cpu_us for r in runs) / len(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds per comparison")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--postgres", action="store_true", help="a fresh PostgreSQL database (tests/pg.py)"
    )
    args = parser.parse_args()
    rng = random.Random(7)

    srv, root = start_server(args.workers, postgres=args.postgres)
    try:
        flag_count = _load_definitions(Api(srv.url), rng)
        people = build_people(rng, args.persons)
        took = _load_people(srv.url, people)
        print(f"store: {args.persons} persons loaded in {took:.1f} s, {flag_count} flags")
        time.sleep(0.5)
        key = _one_flag_key(srv.url)
        sample = rng.sample(people, 2000)

        def flags_body(did: str, groups: dict[str, str], **extra: object) -> bytes:
            return _encode(
                {"api_key": PROJECT_TOKEN, "distinct_id": did, "groups": groups, **extra}
            )

        def ofrep_body(did: str, groups: dict[str, str]) -> bytes:
            context: dict[str, object] = {"targetingKey": did}
            if groups:
                context["groups"] = groups
            return _encode({"context": context})

        one_flags = [flags_body(d, g, flag_keys_to_evaluate=[key]) for d, _, g in sample]
        all_flags = [flags_body(d, g) for d, _, g in sample]
        ofrep_bodies = [ofrep_body(d, g) for d, _, g in sample]
        single = f"/ofrep/v1/evaluate/flags/{key}"
        # the same answers, so the same work
        probe = httpx.post(f"{srv.url}/flags?v=2", content=all_flags[0]).json()["flags"]
        bulk = httpx.post(f"{srv.url}/ofrep/v1/evaluate/flags", content=ofrep_bodies[0],
                          headers=AUTH).json()["flags"]  # fmt: skip
        assert len(probe) == len(bulk) == flag_count
        one = httpx.post(srv.url + single, content=ofrep_bodies[0], headers=AUTH).json()
        assert one["value"] == (probe[key].get("variant") or probe[key]["enabled"]), one

        meter = CpuMeter(srv.proc.pid)  # type: ignore[union-attr]
        pairs = {
            "one flag": _pair(
                meter, srv.url, root, "one flag", ("/flags?v=2", one_flags), (single, ofrep_bodies),
                args.seconds, args.connections, args.rounds,
            ),
            f"all {flag_count} flags": _pair(
                meter, srv.url, root, f"all {flag_count} flags", ("/flags?v=2", all_flags),
                ("/ofrep/v1/evaluate/flags", ofrep_bodies), args.seconds, args.connections,
                args.rounds,
            ),
        }  # fmt: skip
        store = "PostgreSQL" if args.postgres else "SQLite"
        print(f"server: granian, {args.workers} workers, {store}; wrk 1 thread, same machine")
        for label, (flags_runs, ofrep_runs) in pairs.items():
            for result in [*flags_runs, *ofrep_runs]:
                print(result.line())
            rate = _mean_rate(ofrep_runs) / _mean_rate(flags_runs)
            cpu = _mean_cpu(ofrep_runs) / _mean_cpu(flags_runs)
            print(
                f"OFREP / /flags, {label}: throughput {rate:.3f}, CPU per request {cpu:.3f} "
                f"(means of {2 * args.rounds} runs each)"
            )
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
