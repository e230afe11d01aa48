"""The cold ``/flags`` path, stage by stage, in process (issue 39).

Run: ``python -m bench.cold_path [--persons 10000,1000000] [--requests 20000] [--postgres]``

A cold request names a person none of the worker's caches hold: the store reads the person
(and the company group of half of them), the properties are decoded, the 50 flags of
``bench.engine`` evaluated and the answer encoded; then the flag-context cache and the answer
cache keep what was computed, and make room when full. Each stage is timed on its own
(this thread's CPU time around it, less the clock's own cost, in one process, no HTTP: CPU
time does not move when other processes take the cores) over ``--requests`` persons drawn
uniformly at random from all of them, so every request is a different person as on a product
with a million users. The caches run at their default bounds and report what they did: entries
kept, their estimated bytes, and how many times they started over or dropped an entry.

The stored persons: a data dir (SQLite) with the 50 flags, the first 10,000 persons stored
through ``/batch/`` ``$set`` events and the rest by ``bench.prefill`` (rows checked against the
service's), built once per size under the system's temporary directory and reused
(``persons_data_dir``). ``--postgres`` also copies the same persons into a fresh PostgreSQL
database (``tests/pg.py``) and times its one-statement read.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from tests.server import PROJECT_TOKEN, Api, Server

from bench import prefill
from bench.all import _people_loaded
from bench.engine import build_people
from bench.flags_load import _load_definitions, _load_people
from flagstaff.flags import EvalRequest, evaluate_checked
from flagstaff.http.flags import v2_parts
from flagstaff.server.answers import AnswerCache
from flagstaff.server.caches import ProjectFlags
from flagstaff.store.records import FlagContext
from flagstaff.store.sqlite.person_version import context_size
from flagstaff.store.sqlite.store import SQLiteStore

PEOPLE_SEED = 11
"""The seed of ``build_people`` for every persons bench (``bench.all``, ``bench.cpu_ab``)."""
ANSWER_CACHE_MB = 16
"""The answer cache's default bound (``flags_answer_cache_mb``)."""


def persons_data_dir(persons: int) -> Path:
    """A stopped server's data dir with the 50 flags of ``bench.flags_load`` and ``persons``
    persons, built once."""
    root = Path(tempfile.gettempdir()) / f"flagstaff-bench-50flags-{persons}"
    data = root / "data"
    if (root / "ready").exists():
        return data
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    srv = Server(data_dir=data, workers=1).start(timeout=60)
    try:
        _load_definitions(Api(srv.url), random.Random(7))
        _people_loaded(srv, build_people(random.Random(PEOPLE_SEED), persons))
        time.sleep(0.5)
    finally:
        srv.stop()
    (root / "ready").write_text("")
    return data


def copy_data_dir(persons: int, into: Path) -> Path:
    """A private copy of ``persons_data_dir(persons)`` under ``into`` (a server may change it)."""
    target = into / "data"
    shutil.copytree(persons_data_dir(persons), target)
    return target


def postgres_persons(persons: int) -> str:
    """A fresh PostgreSQL database (``tests/pg.py``) with the same flags and persons as
    ``persons_data_dir``: the first 10,000 through ``/batch/``, the rest copied in (rows built
    as ``bench.prefill`` builds them, checked against the service's)."""
    from tests.pg import new_database

    from flagstaff.store.postgres.store import PostgresStore

    url = new_database()
    people = build_people(random.Random(PEOPLE_SEED), persons)
    root = Path(tempfile.mkdtemp(prefix="flagstaff-bench-pg-"))
    srv = Server(data_dir=root / "data", workers=1, env={"FLAGSTAFF_DATABASE_URL": url})
    srv.start(timeout=60)
    try:
        _load_definitions(Api(srv.url), random.Random(7))
        _load_people(srv.url, people[:10_000])
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)

    async def copy_rest() -> None:
        import asyncpg

        store = PostgresStore(url)
        conn = await asyncpg.connect(store.dsn)
        try:
            first, created = await conn.fetchrow(
                "SELECT coalesce(max(id), 0) + 1, coalesce(max(created_at_ms), 0) FROM persons"
            )
            built, _ = prefill.person_rows(people[:50], 1, 0)
            stored = await conn.fetch(
                "SELECT p.uuid::text, p.properties::text FROM person_distinct_ids d "
                "JOIN persons p ON p.id = d.person_id WHERE d.distinct_id = ANY($1::text[]) "
                "ORDER BY d.distinct_id",
                [did for did, _, _ in people[:50]],
            )
            expected = sorted((str(r[2]), r[3].decode()) for r in built)
            assert sorted((r[0], r[1]) for r in stored) == expected, "persons differ"
            rest = people[10_000:]
            for start in range(0, len(rest), 100_000):
                rows, ids = prefill.person_rows(
                    rest[start : start + 100_000], first + start, created
                )
                await conn.copy_records_to_table(
                    "persons",
                    columns=list(prefill.PERSON_COLUMNS),
                    records=[
                        (r[0], r[1], r[2], r[3].decode(), bool(r[4]), r[5], r[6]) for r in rows
                    ],
                )
                await conn.copy_records_to_table(
                    "person_distinct_ids",
                    columns=["project_id", "distinct_id", "person_id"],
                    records=ids,
                )
            await conn.execute(
                "SELECT setval(pg_get_serial_sequence('persons', 'id'), max(id)) FROM persons"
            )
            await conn.execute("VACUUM ANALYZE persons")
            await conn.execute("VACUUM ANALYZE person_distinct_ids")
        finally:
            await conn.close()

    if persons > 10_000:
        asyncio.run(copy_rest())
    return url


def _clock_cost() -> int:
    """Nanoseconds a reading of the thread's CPU clock takes (subtracted from each stage)."""
    clock = time.thread_time_ns
    return min(-clock() + clock() for _ in range(2000))


CLOCK_COST = _clock_cost()


def cpu_ns() -> int:
    return time.thread_time_ns()


class Stages:
    """Nanoseconds spent in each stage, request by request."""

    def __init__(self) -> None:
        self.spent: dict[str, list[int]] = {}

    def add(self, stage: str, ns: int) -> None:
        self.spent.setdefault(stage, []).append(ns)

    def timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        started = cpu_ns()
        value = fn()
        self.add(stage, cpu_ns() - started - CLOCK_COST)
        return value

    def lines(self) -> list[str]:
        out = []
        total = 0.0
        for stage, values in self.spent.items():
            mean = statistics.fmean(values) / 1000
            total += mean
            p99 = sorted(values)[int(len(values) * 0.99)] / 1000
            out.append(f"  {stage:<28} {mean:8.1f} µs CPU mean  {p99:8.1f} µs p99")
        out.append(f"  {'total':<28} {total:8.1f} µs")
        return out


def _body(distinct_id: str, groups: dict[str, str]) -> bytes:
    return msgspec.json.encode(
        {"api_key": PROJECT_TOKEN, "distinct_id": distinct_id, "groups": groups}
    )


def evaluate_and_encode(
    stages: Stages, pf: ProjectFlags, distinct_id: str, groups: dict[str, str], ctx: FlagContext
) -> tuple[bytes | memoryview, ...]:
    """The stages after the read: evaluation (with the request built) and the answer's JSON."""
    group_props = {name: ctx.group_properties.get("0", {}) for name in groups}
    request = EvalRequest(
        distinct_id=distinct_id,
        person_properties=ctx.person_properties,
        groups=groups,
        group_properties=group_props,
    )
    results, _ = stages.timed("evaluate 50 flags", lambda: evaluate_checked(pf.compiled, request))
    return stages.timed("encode", lambda: v2_parts(results, pf.fragments))


class GcWatch:
    """Time the cyclic garbage collector takes meanwhile (it runs inside whichever stage
    allocates when a threshold is crossed), per generation."""

    def __init__(self) -> None:
        self.spent = [0, 0, 0]
        self.runs = [0, 0, 0]
        self._started = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = cpu_ns()
        else:
            self.spent[info["generation"]] += cpu_ns() - self._started
            self.runs[info["generation"]] += 1

    def line(self, requests: int) -> str:
        parts = [
            f"gen{g} {self.runs[g]} runs {self.spent[g] / requests / 1000:.1f} µs/request"
            for g in range(3)
        ]
        return "  garbage collector (inside the stages above): " + ", ".join(parts)


class CacheWatch:
    """What the default-bounded caches do on a stream of misses: entries kept, estimated
    bytes against the bound, and how often they started over or dropped an entry."""

    def __init__(self, answers: AnswerCache) -> None:
        self.answers = answers
        self.answer_drops = 0
        self.context_drops = 0

    def put_answer(self, key: tuple[Any, ...], head: tuple[bytes | memoryview, ...]) -> None:
        before = len(self.answers) + (key not in self.answers._entries)
        self.answers.put(key, head, 50, 1, 1, False)
        self.answer_drops += before - len(self.answers)


async def sqlite_stages(
    persons: int, requests: int, sample: list[tuple[str, dict[str, str]]]
) -> None:
    data = persons_data_dir(persons)
    store = SQLiteStore(data / prefill.DB_NAME)
    await store.open()
    try:
        definitions = await store.definitions(1)
        pf = ProjectFlags(definitions)
        index = {name: i for name, i in pf.group_type_index.items()}
        contexts = store._contexts
        assert contexts is not None
        answers = AnswerCache(ANSWER_CACHE_MB * 1024 * 1024)
        watch = CacheWatch(answers)
        stages = Stages()
        raw = store.db
        # untimed pass: the bytes each read decodes, to time their decode apart
        stored: list[bytes] = []
        for distinct_id, _ in sample:
            row = raw.execute(
                "SELECT p.properties FROM person_distinct_ids d JOIN persons p ON p.id = "
                "d.person_id WHERE d.project_id = 1 AND d.distinct_id = ?",
                (distinct_id,),
            ).fetchone()
            stored.append(row[0])
        gc.collect()
        collector = GcWatch()
        gc.callbacks.append(collector)
        read_ns: list[int] = []
        decode_ns: list[int] = []
        for (distinct_id, groups), text in zip(sample, stored, strict=True):
            indexes = {index[n]: k for n, k in groups.items()}
            started = cpu_ns()
            ctx, size = store._read_flag_context(1, distinct_id, indexes, False, False)
            read_ns.append(cpu_ns() - started - CLOCK_COST)
            started = cpu_ns()
            msgspec.json.decode(text)
            decode_ns.append(cpu_ns() - started - CLOCK_COST)
            head = evaluate_and_encode(stages, pf, distinct_id, groups, ctx)
            key = (1, distinct_id, False, False, *indexes.items())
            before = len(contexts._contexts) + (key not in contexts._contexts)

            def miss_and_put(
                key: tuple[Any, ...] = key, ctx: FlagContext = ctx, size: int = size
            ) -> None:
                contexts.get(key)
                contexts.put(key, ctx, contexts.version, context_size(size))

            stages.timed("flag-context cache miss+put", miss_and_put)
            watch.context_drops += before - len(contexts._contexts)
            answer_key = (
                1,
                False,
                None,
                None,
                "application/json",
                None,
                None,
                _body(distinct_id, groups),
            )

            def put_answer(
                k: tuple[Any, ...] = answer_key, h: tuple[bytes | memoryview, ...] = head
            ) -> None:
                watch.put_answer(k, h)

            stages.timed("answer cache put", put_answer)
        gc.callbacks.remove(collector)
        decode = decode_ns
        stages.spent = {
            "store read (SQL)": [r - d for r, d in zip(read_ns, decode, strict=True)],
            "decode properties": decode,
            **stages.spent,
        }
        print(f"SQLite, {persons:,} persons, {requests:,} cold requests (uniform):")
        print("\n".join(stages.lines()))
        print(collector.line(requests))
        print(
            f"  flag-context cache: {len(contexts._contexts):,} kept, {contexts.bytes / 2**20:.1f} "
            f"of {contexts.limit / 2**20:.0f} MB, {watch.context_drops:,} dropped (a start-over "
            "drops all it holds)"
        )
        print(
            f"  answer cache: {len(answers):,} kept, {answers.bytes / 2**20:.1f} of "
            f"{answers.limit / 2**20:.0f} MB, {watch.answer_drops:,} dropped"
        )
    finally:
        await store.close()


async def postgres_stages(
    url: str, persons: int, requests: int, sample: list[tuple[str, dict[str, str]]]
) -> None:
    """The same stages on PostgreSQL: one statement reads the person, overrides, cohorts and
    groups (``_FLAG_CONTEXT``), decoded by the store; nothing is cached (no person version)."""
    import asyncpg

    from flagstaff.store.postgres.store import PostgresStore

    store = PostgresStore(url)
    await store.open()
    try:
        pf = ProjectFlags(await store.definitions(1))
        index = dict(pf.group_type_index)
        conn = await asyncpg.connect(store.dsn)
        try:
            stored = [
                await conn.fetchval(
                    "SELECT p.properties::text FROM person_distinct_ids d JOIN persons p "
                    "ON p.id = d.person_id WHERE d.project_id = 1 AND d.distinct_id = $1",
                    distinct_id,
                )
                for distinct_id, _ in sample
            ]
        finally:
            await conn.close()
        stages = Stages()
        read_ns: list[int] = []
        wall_ns: list[int] = []
        decode_ns: list[int] = []
        gc.collect()
        for (distinct_id, groups), text in zip(sample, stored, strict=True):
            indexes = {index[n]: k for n, k in groups.items()}
            started, wall = cpu_ns(), time.perf_counter_ns()
            ctx = await store.flag_context(1, distinct_id, indexes)
            read_ns.append(cpu_ns() - started - CLOCK_COST)
            wall_ns.append(time.perf_counter_ns() - wall)
            started = cpu_ns()
            msgspec.json.decode(text)
            decode_ns.append(cpu_ns() - started - CLOCK_COST)
            evaluate_and_encode(stages, pf, distinct_id, groups, ctx)
        stages.spent = {
            "store read (one statement)": [r - d for r, d in zip(read_ns, decode_ns, strict=True)],
            "decode properties": decode_ns,
            **stages.spent,
        }
        print(f"PostgreSQL, {persons:,} persons, {requests:,} cold requests (uniform):")
        print("\n".join(stages.lines()))
        print(
            f"  the read's wall time (the round trip and PostgreSQL's own work): "
            f"{statistics.fmean(wall_ns) / 1000:.1f} µs mean"
        )
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--persons", default="10000,1000000")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    for persons in (int(p) for p in args.persons.split(",")):
        people = build_people(random.Random(PEOPLE_SEED), persons)
        rng = random.Random(5)
        sample = [people[rng.randrange(persons)] for _ in range(args.requests)]
        sample2 = [(did, groups) for did, _, groups in sample]
        del people
        asyncio.run(sqlite_stages(persons, args.requests, sample2))
        if args.postgres:
            url = postgres_persons(persons)
            asyncio.run(postgres_stages(url, persons, args.requests, sample2))


if __name__ == "__main__":
    main()
