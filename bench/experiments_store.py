"""Experiments in the running server: ingest throughput with five running experiments against
none, and the results endpoint over HTTP for an experiment with 1M exposed persons.

    python -m bench.experiments_store [--postgres] [--seconds 8] [--rounds 4] [--persons 1000000]
    python -m bench.experiments_store --skip-ingest --trusted [--postgres]   # all inference on
    python -m bench.experiments_store --store-only [--postgres] [--rounds 3]
    python -m bench.experiments_store --store-only --cuped [--new-exposures] [--postgres]

Part 1, ingest: wrk posts 100-event `/batch/` requests (posthog-js-like, 10,000 users; of every
20 events, one `$feature_flag_called` of one of five experiment flags with its variant, one
`purchase` with an amount, 18 `$pageview`s). The same stream runs with no experiment, then
with five running experiments on those flags (each a mean of `amount`, a funnel to `purchase`,
a ratio; with ``--pageview-metric`` the first also counts `$pageview`, so that every event
concerns it and every exposed person's state changes with each pageview), launched at the
round's start, alternating `--rounds` times back to back in one server, so the ratio is
measured under the same machine load; every other round runs five first, so that the server
slowing as its database grows weighs on both cases alike (use an even number of rounds).
Every event is acknowledged after its commit.

Part 2, results: one more experiment gets the aggregates of `--persons` exposed persons built
by the pure accumulator (1-3 goal events each) and written straight into the aggregate tables
(`experiment_person_state`, one row per person, and `experiment_totals`), as ingestion would
have left them; no events are inserted, since a results request reads only the totals (10M
stored events would not change what it reads). Then `GET .../results/` is timed over HTTP:
the first request of each worker (which imports scipy) and the best and median of 20 more.

Part 3 (``--store-only``), for a ratio less at the mercy of a shared machine, in-process (no
HTTP, no wrk) with the same mix, 40,000 events per case in calls of ``--batch-size`` (2,000),
no experiment and five running alternated ``--rounds`` times (which runs first alternates
too), the best of each and the paired ratio (``_paired_ratio``): on SQLite the
CPU time of the ingest writer's step (``apply_ingest``: rules, experiments, SQL, one
transaction per call), on PostgreSQL the wall time of ``store.ingest`` (the round trips are
the cost there), and the CPU time of this process and of the PostgreSQL backends of its
database (steadier on a shared machine).

With ``--cuped``, part 3 compares five running experiments without CUPED against the same
five with it (``--new-exposures``: every flag call exposes a person new to its experiment).

Part 4 (``--batch-path``): what both engines run per batch for the experiments
(``batch_work``, ``apply_work``), in-process without a store: see :func:`_batch_path`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from tests.server import PROJECT_TOKEN, Api, Server

from bench.experiments import START_MS, definition, flag_call
from bench.load import CpuMeter, WrkResult, postmaster_of, start_server, wrk
from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
)
from flagstaff.experiments.model import parse_experiment
from flagstaff.store.experiment_batch import encode_person, encode_totals

EXPERIMENTS = "/api/projects/@current/experiments/"
PAGEVIEW_METRIC = False
"""Whether the first experiment also counts `$pageview` (``--pageview-metric``)."""
EXPOSED_GOALS = False
"""``--exposed-goals`` (parts 1, 3 and 4): the purchase and half the pageviews of each block of 20
events come from the user its flag call exposed, who keeps one variant per flag (the default
mix never sends a goal event of an exposed person: flag calls go to users 0 mod 20, purchases
to 19 mod 20, pageviews to the rest)."""
NEW_EXPOSURES = False
"""``--new-exposures`` (part 3): flag calls cycle over all 10,000 users (the n-th call goes to
user ``n * 7919 % 10000``, its flag is ``n % 5``), so that every call of a run exposes a person
new to its experiment: with CUPED, each reads its person's events before exposure. By
default 500 users get the flag calls, all of them exposed while the first calls are made."""
FLAGS = [f"bench-exp-{i}" for i in range(5)]

_PAGEVIEW = (
    '{"event":"$pageview","uuid":"%s","properties":{"distinct_id":"user-%d",'
    '"$current_url":"https://shop.example.com/p/%d","$host":"shop.example.com",'
    '"$browser":"Chrome","$os":"Mac OS X","$lib":"web","$lib_version":"1.449.2",'
    '"$session_id":"0193a1b2-c3d4-7e5f-8a9b-%012d","title":"Product %d"}}'
)
_FLAG_CALL = (
    '{"event":"$feature_flag_called","uuid":"%s","properties":{"distinct_id":"user-%d",'
    '"$feature_flag":"%s","$feature_flag_response":"%s","$lib":"web"}}'
)
_PURCHASE = (
    '{"event":"purchase","uuid":"%s","properties":{"distinct_id":"user-%d","amount":%d,'
    '"$lib":"web"}}'
)


def _lua(text: str) -> str:
    return text.replace('"', '\\"')


def _script(folder: Path, run_id: int) -> Path:
    """A wrk script: 100-event batches of the mix described above, fresh uuids per run."""
    flags = "{" + ",".join(f'"{f}"' for f in FLAGS) + "}"
    script = folder / f"experiments-{run_id}.lua"
    script.write_text(
        f"""
local pageview = "{_lua(_PAGEVIEW)}"
local flagcall = "{_lua(_FLAG_CALL)}"
local purchase = "{_lua(_PURCHASE)}"
local flags = {flags}
local n = 0
local run = {run_id}
local exposed = {"true" if EXPOSED_GOALS else "false"}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local function uuid(i)
  return string.format("0194%04x-0000-7000-8%03x-%012x", run % 65536, run % 4096, i)
end
request = function()
  local events = {{}}
  for k = 1, 100 do
    n = n + 1
    local kind = n % 20
    local user = (n * 7919) % 10000
    if exposed and (kind == 1 or kind % 2 == 0) then user = ((n - kind) * 7919) % 10000 end
    if kind == 0 then
      local variant = "control"
      local spread = user * 31 + n
      if exposed then spread = math.floor(user / 20) + (n / 20) % 5 end
      if spread % 2 == 1 then variant = "test" end
      events[k] = string.format(flagcall, uuid(n), user, flags[(n / 20) % 5 + 1], variant)
    elseif kind == 1 then
      events[k] = string.format(purchase, uuid(n), user, 5 + n % 50)
    else
      events[k] = string.format(pageview, uuid(n), user, n % 500, n, n % 500)
    end
  end
  local body = '{{"api_key":"{PROJECT_TOKEN}","batch":[' .. table.concat(events, ",") .. "]}}"
  return wrk.format(nil, "/batch/", nil, body)
end
"""
    )
    return script


def _experiment_body(index: int, flag: str, cuped: bool = False) -> dict[str, Any]:
    """Launched now, as an experiment usually is (launching recomputes from the events
    after the start date: here none yet; with ``cuped``, also those of the 14 days before)."""
    # bench.experiments' experiment 0 also counts $pageview (then every event concerns it)
    body: dict[str, Any] = msgspec.to_builtins(definition(index if PAGEVIEW_METRIC else index + 1))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body.update(name=f"bench {index}", feature_flag_key=flag, start_date=now)
    if cuped:
        body["stats_config"] = {**body["stats_config"], "cuped": True}
    return body


def ingest(
    srv: Server, root: Path, seconds: int, rounds: int, cpus: list[tuple[str, float]]
) -> list[tuple[str, WrkResult]]:
    """The rounds' wrk results; ``cpus`` receives each round's server CPU µs per event: the
    server's own processes and, on PostgreSQL, the database server's (the postmaster's
    children: backends, WAL writer, checkpointer)."""
    api = Api(srv.url)
    url = srv.env.get("FLAGSTAFF_DATABASE_URL")
    postmaster = asyncio.run(postmaster_of(url)) if url else None
    run_id = random.randrange(1, 60000)
    wrk("warm-up", srv.url + "/batch/", seconds=2, connections=8, script=_script(root, run_id))
    results: list[tuple[str, WrkResult]] = []
    created: list[int] = []
    for round_ in range(rounds):
        # none then five, then five then none: the server slows as its database grows (a run
        # ingests some 300,000 events), and a fixed order would charge that to the second case
        for case in ("none", "five") if round_ % 2 == 0 else ("five", "none"):
            if case == "five":
                for i, flag in enumerate(FLAGS):
                    r = api.post(EXPERIMENTS, json=_experiment_body(i, flag))
                    assert r.status_code == 201, r.text
                    created.append(r.json()["id"])
            run_id += 1
            label = f"round {round_ + 1}, {case} running"
            assert srv.proc is not None
            meter = CpuMeter(srv.proc.pid)
            meter.start()
            database = CpuMeter(postmaster) if postmaster else None
            if database is not None:
                database.start()
            result = wrk(
                label,
                srv.url + "/batch/",
                seconds=seconds,
                connections=32,
                script=_script(root, run_id),
            )
            spent = meter.stop()
            if database is not None:
                spent["PostgreSQL"] = database.stop()["workers"]
            events = result.requests * 100
            cpu = {role: seconds_ / events * 1e6 for role, seconds_ in spent.items()}
            results.append((case, result))
            cpus.append((case, sum(cpu.values())))
            print(
                result.line(),
                f"= {result.requests_per_s * 100:,.0f} events/s; server CPU per event: "
                + " + ".join(f"{role} {us:.1f}" for role, us in cpu.items() if us)
                + " µs",
                flush=True,
            )
            if case == "five":
                for eid in created:
                    assert api.delete(f"{EXPERIMENTS}{eid}/").status_code == 204
                created.clear()
    return results


TRUSTED = False
"""``--trusted``: the results experiment with every inference of docs/experiments.md on."""


def _results_body() -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(definition(0))
    body.update(name="1M", feature_flag_key="bench-results", start_date="2024-01-01T00:00:00Z")
    if TRUSTED:
        body["stats_config"] = {
            "method": "frequentist",
            "sequential": True,
            "cuped": True,
            "cuped_lookback_days": 14,
            "multiple_testing_correction": "holm",
            "minimum_detectable_effect": 0.02,
        }
        body["metrics_guardrail"] = [
            {
                "uuid": "guard-carts",
                "metric_type": "mean",
                "goal": "increase",
                "source": {"event": "cart"},
            }
        ]
    return body


def _build_state(persons: int) -> tuple[ExperimentSpec, Any]:
    spec = ExperimentSpec(0, parse_experiment(_results_body()))
    accumulator = ExperimentAccumulator([spec])
    rng = random.Random(7)
    for n in range(persons):
        person = f"{n:08x}-0000-4000-8000-{n:012x}"
        at = START_MS + n
        variant = "control" if rng.random() < 0.5 else "test"
        accumulator.add(flag_call(person, spec.flag_key, variant, n))
        if TRUSTED:
            # CUPED's covariates: the person's purchases in the 14 days before exposure (and
            # so before the experiment's start), of amounts near the person's own level, as
            # the later ones are; late pre-window events are applied as ingestion applies them.
            level = rng.randint(5, 200)
            for k in range(rng.randint(0, 2)):
                props = {"amount": max(1, level + rng.randint(-20, 20))}
                before = at - (k + 1) * 3_600_000
                accumulator.add(ExperimentEvent(person, person, "purchase", before, props))
        for k in range(rng.randint(1, 3)):
            name = "cart" if k == 0 else "purchase"
            amount = max(1, level + rng.randint(-20, 20)) if TRUSTED else rng.randint(5, 200)
            props = {"amount": amount}
            accumulator.add(ExperimentEvent(person, person, name, at + 1000 + k, props))
    return spec, accumulator.state(0)


def _fill_sqlite(srv: Server, experiment_id: int, fingerprint: str, state: Any) -> None:
    path = srv.data_dir / "flagstaff.sqlite3"
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=60)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "DELETE FROM experiment_person_state WHERE experiment_id = ?", (experiment_id,)
        )
        conn.execute("DELETE FROM experiment_totals WHERE experiment_id = ?", (experiment_id,))
        conn.executemany(
            "INSERT INTO experiment_person_state VALUES (?, ?, ?)",
            ((experiment_id, u, encode_person(p)) for u, p in state.persons.items()),
        )
        conn.execute(
            "INSERT INTO experiment_totals VALUES (?, 0, ?, ?)",
            (experiment_id, fingerprint, encode_totals(state.totals)),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def _fill_postgres(url: str, experiment_id: int, fingerprint: str, state: Any) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(
                "DELETE FROM experiment_person_state WHERE experiment_id = $1", experiment_id
            )
            await conn.execute(
                "DELETE FROM experiment_totals WHERE experiment_id = $1", experiment_id
            )
            await conn.copy_records_to_table(
                "experiment_person_state",
                records=((experiment_id, u, encode_person(p)) for u, p in state.persons.items()),
            )
            await conn.execute(
                "INSERT INTO experiment_totals VALUES ($1, 1, $2, $3)",
                experiment_id,
                fingerprint,
                encode_totals(state.totals),
            )
    finally:
        await conn.close()


def results(srv: Server, persons: int) -> None:
    api = Api(srv.url)
    started = time.perf_counter()
    _spec, state = _build_state(persons)
    print(f"aggregates of {persons:,} persons built in {time.perf_counter() - started:.1f} s")
    body = _results_body()
    r = api.post(EXPERIMENTS, json=body)
    assert r.status_code == 201, r.text
    eid = r.json()["id"]
    fingerprint = ExperimentSpec(eid, parse_experiment(body)).fingerprint
    started = time.perf_counter()
    database_url = srv.env.get("FLAGSTAFF_DATABASE_URL")
    if database_url:
        asyncio.run(_fill_postgres(database_url, eid, fingerprint, state))
    else:
        _fill_sqlite(srv, eid, fingerprint, state)
    print(f"written to the aggregate tables in {time.perf_counter() - started:.1f} s")
    url = f"{srv.url}{EXPERIMENTS}{eid}/results/"
    with httpx.Client(headers=api.client.headers, timeout=60) as http:
        firsts = []
        for _ in range(4):  # each worker's first request imports scipy
            t = time.perf_counter()
            answer = http.get(url)
            firsts.append(time.perf_counter() - t)
            assert answer.status_code == 200, answer.text
        exposures = answer.json()["exposures"]
        assert sum(exposures.values()) == persons, exposures
        print(f"stats_config_applied: {answer.json()['stats_config_applied']}")
        if TRUSTED:
            reductions = {
                f"{metric['uuid']}/{result['key']}": round(result["cuped_variance_reduction"], 3)
                for metric in answer.json()["metrics"]
                if metric["metric_type"] != "ratio"  # CUPED adjusts means and funnels
                for result in metric["variant_results"]
            }
            print(f"CUPED's variance reduction per metric and variant: {reductions}")
        times = []
        for _ in range(20):
            t = time.perf_counter()
            assert http.get(url).status_code == 200
            times.append(time.perf_counter() - t)
    print(f"exposures reported: {exposures}")
    print(
        "GET results/: first requests "
        + ", ".join(f"{t * 1000:.0f}" for t in firsts)
        + f" ms; then best {min(times) * 1000:.1f} ms, median "
        f"{statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument(
        "--trusted",
        action="store_true",
        help="part 2 with sequential testing, CUPED, Holm and a guardrail metric on",
    )
    parser.add_argument(
        "--store-only", action="store_true", help="only part 3: the store's ingest in-process"
    )
    parser.add_argument(
        "--batch-path",
        action="store_true",
        help="only part 4: the engines' shared batch path in-process, no store",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=2000,
        help="--store-only, --batch-path: events per call (the server's hold about 700 here)",
    )
    parser.add_argument(
        "--exposed-goals",
        action="store_true",
        help="goal events from exposed persons (one variant per person and flag)",
    )
    parser.add_argument(
        "--cuped",
        action="store_true",
        help="--store-only: five running without CUPED against five with it (14 days)",
    )
    parser.add_argument(
        "--new-exposures",
        action="store_true",
        help="--store-only: every flag call exposes a person new to its experiment",
    )
    parser.add_argument(
        "--pageview-metric",
        action="store_true",
        help="the first experiment also counts $pageview: every event concerns it",
    )
    args = parser.parse_args()
    global PAGEVIEW_METRIC, EXPOSED_GOALS, TRUSTED, NEW_EXPOSURES
    TRUSTED = args.trusted
    PAGEVIEW_METRIC = args.pageview_metric
    EXPOSED_GOALS = args.exposed_goals
    NEW_EXPOSURES = args.new_exposures
    if args.batch_path:
        _batch_path(args.batch_size, args.rounds)
        return
    if args.store_only:
        cases = ("five", "cuped") if args.cuped else ("none", "five")
        asyncio.run(
            _store_ingest(
                args.postgres, 40_000 // args.batch_size, args.batch_size, args.rounds, cases
            )
        )
        return
    srv, root = start_server(args.workers, postgres=args.postgres)
    try:
        print(
            f"server: {args.workers} workers, "
            f"{'PostgreSQL' if args.postgres else 'SQLite'}; wrk on the same machine"
        )
        if not args.skip_ingest:
            cpus: list[tuple[str, float]] = []
            measured = ingest(srv, root, args.seconds, args.rounds, cpus)
            cpu_none = statistics.median(c for case, c in cpus if case == "none")
            cpu_five = statistics.median(c for case, c in cpus if case == "five")
            print(
                f"server CPU per event, median: {cpu_five:.1f} µs five running, {cpu_none:.1f}"
                f" none: a CPU-bound throughput ratio of {cpu_none / cpu_five:.3f}"
            )
            none = [r.requests_per_s for case, r in measured if case == "none"]
            five = [r.requests_per_s for case, r in measured if case == "five"]
            ratio = sum(five) / sum(none)
            mean_five = sum(five) / len(five) * 100
            mean_none = sum(none) / len(none) * 100
            print(
                f"ingest with five running experiments / none: {ratio:.3f} "
                f"(events/s {mean_five:,.0f} vs {mean_none:,.0f})"
            )
            # each round runs both cases back to back: their ratio is paired against the
            # machine's load of the moment, and the median of the rounds' ratios is not
            # carried by one round that a neighbour slowed down
            paired = [f / n for n, f in zip(none, five, strict=True)]
            print(
                "per round, five / none: "
                + ", ".join(f"{r:.3f}" for r in paired)
                + f"; median {statistics.median(paired):.3f}"
            )
        if args.persons:
            results(srv, args.persons)
    finally:
        srv.stop()


# Part 3: the store's ingest call in-process, best of several runs ---------------------------


def _writer_events(start: int, count: int) -> list[Any]:
    """The wrk stream's mix as normalized events (the store's input)."""
    import orjson

    from flagstaff.ingest.model import Event

    out = []
    now = int(time.time() * 1000)
    for n in range(start, start + count):
        kind = n % 20
        # with --exposed-goals, the purchase and every other pageview of a block of 20 come
        # from the user its flag call exposed
        block = EXPOSED_GOALS and (kind == 1 or kind % 2 == 0)
        user = ((n - kind if block else n) * 7919) % 10000
        if kind == 0 and NEW_EXPOSURES:
            user = (n // 20 * 7919) % 10000
        if kind == 0:
            # one variant per user and flag with --exposed-goals, any variant otherwise
            spread = user // 20 + (n // 20) % 5 if EXPOSED_GOALS else user * 31 + n
            variant = "test" if spread % 2 else "control"
            name = "$feature_flag_called"
            props: dict[str, Any] = {
                "$feature_flag": FLAGS[(n // 20) % 5],
                "$feature_flag_response": variant,
            }
        elif kind == 1:
            name, props = "purchase", {"amount": 5 + n % 50}
        else:
            name = "$pageview"
            props = {"$current_url": f"https://shop.example.com/p/{n % 500}", "title": "P"}
        uid = f"0195{n >> 32:04x}-{(n >> 16) & 0xFFFF:04x}-7000-8000-{n & 0xFFFFFFFFFFFF:012x}"
        out.append(
            Event(
                uid,
                name,
                f"user-{user}",
                props,
                now + n,
                now + n,
                None,
                None,
                None,
                True,
                False,
                orjson.dumps(props),
            )
        )
    return out


_WRITER_CACHE: dict[Path, Any] = {}
"""The writer's person cache (with its remembered experiment states), kept across rounds as
the ingest writer process keeps it."""


_STEP = [0.0]
"""CPU seconds of the experiments' own step (``prepare`` and ``write``) in the last call."""


def _timed_step(fn: Any) -> Any:
    def timed(*args: Any) -> Any:
        began = time.process_time()
        try:
            return fn(*args)
        finally:
            _STEP[0] += time.process_time() - began

    return timed


def _sqlite_writer(path: Path, project_id: int, work: list[list[Any]]) -> float:
    """CPU time of the ingest writer's own step (``apply_ingest``: rules, experiments, SQL)
    for ``work``, one transaction per call, as the ingest writer process runs it (with its
    person cache); and, as it does after a commit, the events-by-distinct-id index's step
    once ``event_index.BATCH`` events are past its watermark."""
    from flagstaff.store.sqlite import event_index
    from flagstaff.store.sqlite.ingest import apply_ingest
    from flagstaff.store.sqlite.person_cache import PersonCache
    from flagstaff.store.sqlite.protocol import for_writer
    from flagstaff.store.sqlite.writer import connect

    conn = connect(path)
    try:
        prepared = [for_writer(events) for events in work]
        cache = _WRITER_CACHE.setdefault(path, PersonCache())
        # The bench's own objects (all the calls' events, made up front) are not the writer's
        # heap: out of the collector's sight, so that a full collection costs what it would
        # in the writer instead of landing at random in one case's timing.
        gc.collect()
        gc.freeze()
        _STEP[0] = 0.0
        began = time.process_time()
        for events in prepared:
            conn.execute("BEGIN IMMEDIATE")
            apply_ingest(conn, project_id, events, [], 0, cache)
            conn.execute("COMMIT")
            if event_index.unindexed(conn) >= event_index.BATCH:
                conn.execute("BEGIN IMMEDIATE")
                event_index.index_events(conn)
                conn.execute("COMMIT")
        return time.process_time() - began
    finally:
        gc.unfreeze()
        conn.close()


async def _store_ingest(
    postgres: bool, batches: int, size: int, rounds: int, cases: tuple[str, str]
) -> None:
    """``cases``: ``none``, ``five`` running, ``cuped`` (five running with CUPED); the first
    is the reference of the ratio."""
    from flagstaff.application.flags import flag_from_input
    from flagstaff.experiments.model import experiment_flag
    from flagstaff.store.postgres.store import PostgresStore
    from flagstaff.store.records import FlagWrite
    from flagstaff.store.sqlite.store import SQLiteStore

    if postgres:
        from tests.pg import new_database

        store: Any = PostgresStore(new_database())
    else:
        import tempfile

        store = SQLiteStore(Path(tempfile.mkdtemp(prefix="flagstaff-bench-")) / "db.sqlite3")
    await store.open()
    project = await store.create_project("bench")
    n = 0
    created: list[int] = []
    best = dict.fromkeys(cases, float("inf"))
    best_cpu = dict(best)
    best_step = dict(best)
    runs: dict[str, list[float]] = {case: [] for case in cases}
    runs_cpu: dict[str, list[float]] = {case: [] for case in cases}
    runs_step: dict[str, list[float]] = {case: [] for case in cases}
    if not postgres:  # the experiments' own step, timed apart (its name differs on main)
        from flagstaff.store.sqlite import ingest as sqlite_ingest

        for name in ("prepare", "write"):
            if hasattr(sqlite_ingest.experiments, name):
                step = getattr(sqlite_ingest.experiments, name)
                setattr(sqlite_ingest.experiments, name, _timed_step(step))
    try:
        await store.ingest(project.id, _writer_events(0, 10_000), [])  # the 10,000 persons
        n = 10_000
        for round_ in range(rounds):
            # every other round runs the second case first: the database grows by each run's
            # events, and with a fixed order the second case would always meet a larger one
            for case in cases if round_ % 2 == 0 else cases[::-1]:
                if case != "none":
                    for i, flag in enumerate(FLAGS):
                        parsed = parse_experiment(_experiment_body(i, flag, case == "cuped"))
                        existing = await store.get_flag_by_key(project.id, flag)
                        write = (
                            FlagWrite(flag=existing, flag_id=existing.id, version=existing.version)
                            if existing is not None
                            else FlagWrite(flag=flag_from_input(experiment_flag(parsed)))
                        )
                        record = await store.create_experiment(project.id, parsed, write)
                        created.append(record.id)
                work = [_writer_events(n + b * size, size) for b in range(batches)]
                n += batches * size
                if postgres:
                    backends = await _backends(store)
                    cpu = time.process_time() + _cpu(backends)
                    began = time.perf_counter()
                    for events in work:
                        await store.ingest(project.id, events, [])
                    took = time.perf_counter() - began
                    cpu = time.process_time() + _cpu(backends | await _backends(store)) - cpu
                    best_cpu[case] = min(best_cpu[case], cpu)
                    runs_cpu[case].append(cpu)
                else:
                    took = _sqlite_writer(store.path, project.id, work)
                    best_step[case] = min(best_step[case], _STEP[0])
                    runs_step[case].append(_STEP[0])
                best[case] = min(best[case], took)
                runs[case].append(took)
                for eid in created:
                    record = await store.get_experiment(project.id, eid)
                    await store.update_experiment(project.id, eid, record.definition, deleted=True)
                created.clear()
    finally:
        await store.close()
    events = batches * size
    names = {"none": "none", "five": "five running", "cuped": "five running with CUPED"}
    first, second = cases
    a_us, b_us = best[first] / events * 1e6, best[second] / events * 1e6
    what = "store.ingest, wall time" if postgres else "the ingest writer's apply_ingest, CPU time"
    print(
        f"{what} ({'PostgreSQL' if postgres else 'SQLite'}, {batches} calls "
        f"of {size} events, best of {rounds}): {names[first]} {a_us:.1f} us/event, "
        f"{names[second]} {b_us:.1f} us/event, ratio of throughputs {a_us / b_us:.3f}"
    )
    if not postgres:
        print(
            f"of which the experiments' own step: {names[first]} "
            f"{best_step[first] / events * 1e6:.2f} us/event, {names[second]} "
            f"{best_step[second] / events * 1e6:.2f} us/event"
        )
    if postgres:
        a_us, b_us = best_cpu[first] / events * 1e6, best_cpu[second] / events * 1e6
        print(
            f"CPU time, this process and its PostgreSQL backends: {names[first]} {a_us:.1f} "
            f"us/event, {names[second]} {b_us:.1f} us/event, ratio {a_us / b_us:.3f}"
        )
    paired = [("wall time", runs)] + (
        [("CPU time", runs_cpu)] if postgres else [("the experiments' step", runs_step)]
    )
    for what, measured in paired:
        print(
            f"paired, {what}: {names[second]} over {names[first]}, the geometric mean of each "
            f"round's ratio (the order alternating): {_paired_ratio(measured, first, second):.3f}"
        )


def _batch_path(size: int, rounds: int) -> None:
    """Part 4: ``batch_work`` and ``apply_work`` alone (what both engines run per batch, no
    SQL), five running experiments, 100 batches of ``size`` events after 100 that expose the
    persons and fill the accumulator (as the SQLite writer keeps it); each batch's persons as
    the rules hand them over (only the batch's distinct ids). CPU time, best of ``rounds``."""
    from flagstaff.experiments.exposure import ExperimentAccumulator
    from flagstaff.ingest.persons import PersonState, person_uuid
    from flagstaff.store.experiment_batch import SpecCache, apply_work, batch_work
    from flagstaff.store.sqlite.protocol import for_writer

    specs = []
    for i, flag in enumerate(FLAGS):
        body = _experiment_body(i, flag)
        body["start_date"] = "2020-01-01T00:00:00Z"  # before the events' times
        specs.append(ExperimentSpec(i + 1, parse_experiment(body)))
    running = SpecCache().put("bench", 1, 1, specs)
    people = {
        f"user-{u}": PersonState(u, person_uuid(1, f"user-{u}"), {}, False, 0)
        for u in range(10_000)
    }
    batches = [for_writer(_writer_events(n * size, size)) for n in range(200)]
    books = [{e.distinct_id: people[e.distinct_id] for e in batch} for batch in batches]
    accumulator = ExperimentAccumulator(specs, increments=False)

    def run(part: slice) -> tuple[float, float]:
        work_s = apply_s = 0.0
        for batch, book in zip(batches[part], books[part], strict=True):
            began = time.process_time()
            work = batch_work(running, 1, book, [], batch)
            middle = time.process_time()
            assert work is not None
            apply_work(accumulator, work, {}, set())
            work_s += middle - began
            apply_s += time.process_time() - middle
        return work_s, apply_s

    run(slice(0, 100))
    gc.collect()
    gc.freeze()
    try:
        timed = [run(slice(100, 200)) for _ in range(rounds)]
    finally:
        gc.unfreeze()
    events = 100 * size
    work_us = min(t[0] for t in timed) / events * 1e6
    apply_us = min(t[1] for t in timed) / events * 1e6
    print(
        f"batch path, {size}-event batches, best of {rounds}: batch_work {work_us:.3f} + "
        f"apply_work {apply_us:.3f} = {work_us + apply_us:.3f} us/event"
    )


def _paired_ratio(measured: dict[str, list[float]], first: str, second: str) -> float:
    """The second case's cost over the first's, from each round's two runs, side by side in
    time; the order alternates, so a cost that grows steadily with the stored events (each run
    adds 40,000) adds as much to one case as to the other over an even number of rounds, which
    the best of each case does not do (the first run of all meets the smallest database)."""
    ratios = [b / a for a, b in zip(measured[first], measured[second], strict=True)]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


async def _backends(store: Any) -> set[int]:
    """The server processes of the bench's own database (its pool's connections)."""
    async with store._pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        )
    return {r[0] for r in rows}


def _cpu(pids: set[int]) -> float:
    from bench.load import _cpu_seconds

    return sum(_cpu_seconds(pid) for pid in pids)


if __name__ == "__main__":
    main()
