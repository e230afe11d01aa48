"""Capture through the NATS JetStream stream against the direct PostgreSQL path, same run.

Run: ``python -m bench.stream_capture [--seconds 10] [--workers 1] [--probes 200]
[--probes-only]``

Starts a 3-server NATS cluster (tests/nats_cluster.py, replicas 3) and a PostgreSQL
(tests/pg.py), then:

1. wrk on ``/batch/`` (100 posthog-js-like events per request, bench/ingest_load.py's
   script) against a node writing PostgreSQL directly, then against a node publishing to
   the stream (no consumer running, so the stream path's figure is capture alone);
2. one ``flagstaff consume`` drains the backlog: events per second applied to PostgreSQL;
3. CPU per event of each part (HTTP workers, NATS servers, consumer, PostgreSQL);
4. under a steady background load (``--background`` events/s), ``--probes`` times: a
   ``$set`` sent to capture, then ``/flags`` polled until the flag that reads it turns on:
   the delay from capture's 200 to a flag seeing the ``$set``, p50/p99 (``--probes-only``:
   this part alone, on an empty database).

The machine's load average is printed with each part: on a shared machine it says how far
the figures are to be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
from tests.nats_cluster import NatsCluster
from tests.pg import new_database
from tests.server import PROJECT_TOKEN, Api, Server
from tests.stream_nodes import ConsumerProcess, stream_env

from bench.ingest_load import _script
from bench.load import CpuMeter, _children, _cpu_seconds, postmaster_of, wrk


def _tree_cpu(pids: list[int]) -> float:
    return sum(_cpu_seconds(p) + sum(_cpu_seconds(c) for c in _children(p)) for p in pids)


def _count(url: str) -> int:
    import asyncpg

    async def run() -> int:
        conn = await asyncpg.connect(url)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM events"))
        finally:
            await conn.close()

    return asyncio.run(run())


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def _probe_flags(node: Server, probes: int, background: int) -> list[float]:
    Api(node.url).create_person_flag("probed", "probed", "yes")
    stop = threading.Event()

    def steady() -> None:
        """About ``background`` events/s in 50-event batches."""
        with httpx.Client(timeout=30) as client:
            n = 0
            while not stop.is_set():
                events = [
                    {
                        "event": "$pageview",
                        "uuid": str(uuid.uuid4()),
                        "distinct_id": f"bg-{(n + k) % 5000}",
                        "properties": {"$set": {"seen": n}},
                    }
                    for k in range(50)
                ]
                n += 50
                client.post(f"{node.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": events})
                time.sleep(50 / background)

    bg = threading.Thread(target=steady, daemon=True)
    bg.start()
    delays: list[float] = []
    with httpx.Client(timeout=30) as client:
        for _ in range(probes):
            did = f"probe-{uuid.uuid4().hex[:10]}"
            event = {"event": "$set", "distinct_id": did, "properties": {"$set": {"probed": "yes"}}}
            r = client.post(f"{node.url}/i/v0/e/", json={"api_key": PROJECT_TOKEN, **event})
            assert r.status_code == 200, r.text
            acked = time.perf_counter()
            while True:
                flags = client.post(
                    f"{node.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": did}
                ).json()["flags"]
                if flags["probed"]["enabled"]:
                    delays.append(time.perf_counter() - acked)
                    break
                if time.perf_counter() - acked > 30:
                    raise SystemExit("bench: a $set was not seen by /flags within 30 s")
                time.sleep(0.002)
            time.sleep(random.uniform(0.01, 0.05))
    stop.set()
    bg.join()
    return delays


def _report_probes(node: Server, probes: int, background: int) -> None:
    before = _load()
    delays = sorted(_probe_flags(node, probes, background))
    p50 = statistics.median(delays) * 1000
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000
    print(
        f"$set acknowledged by capture -> seen by /flags, {len(delays)} probes under "
        f"~{background} events/s: p50 {p50:.0f} ms, p99 {p99:.0f} ms, max "
        f"{delays[-1] * 1000:.0f} ms ({before} before, {_load()} after)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--background", type=int, default=500, help="events/s while probing")
    parser.add_argument(
        "--probes-only", action="store_true", help="skip the capture and drain throughput parts"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="flagstaff-bench-stream-"))
    cluster = NatsCluster(3).start()
    direct_db, stream_db = new_database(), new_database()
    env = stream_env(stream_db, cluster.url)
    direct = Server(
        data_dir=root / "direct", workers=args.workers, env={"FLAGSTAFF_DATABASE_URL": direct_db}
    ).start(timeout=60)
    streamed = Server(data_dir=root / "stream", workers=args.workers, env=env).start(timeout=60)
    consumer: ConsumerProcess | None = None
    try:
        if args.probes_only:
            consumer = ConsumerProcess(root / "consumer.log", env).start()
            _report_probes(streamed, args.probes, args.background)
            return
        print(f"capture and drain: {_load()}")
        postmaster = asyncio.run(postmaster_of(direct_db))
        run_id = random.randrange(1, 60000)
        results = {}
        cpu = {}
        for label, node in (("direct PostgreSQL", direct), ("stream (replicas 3)", streamed)):
            warm = _script(root, "/batch/", 100, run_id)
            wrk("warm-up", node.url + "/batch/", seconds=2, connections=8, script=warm)
            assert node.proc is not None
            meter = CpuMeter(node.proc.pid)
            meter.start()
            nats_before = _tree_cpu([p.pid for p in cluster.procs if p is not None])
            pg_before = _tree_cpu([postmaster])
            result = wrk(
                f"POST /batch/ (100 events), {label}",
                node.url + "/batch/",
                seconds=args.seconds,
                connections=args.connections,
                script=_script(root, "/batch/", 100, run_id + 1 + len(results)),
            )
            spent = meter.stop()
            events = result.requests_per_s * 100 * args.seconds
            cpu[label] = {
                "http": spent["workers"] / events * 1e6,
                "nats": (_tree_cpu([p.pid for p in cluster.procs if p is not None]) - nats_before)
                / events
                * 1e6,
                "pg": (_tree_cpu([postmaster]) - pg_before) / events * 1e6,
            }
            results[label] = result
            run_id += 7

        queued = _count(stream_db)
        assert queued == 0, "no consumer ran yet, nothing should be stored"
        consumer = ConsumerProcess(root / "consumer.log", env).start()
        assert consumer.proc is not None
        c_before = _cpu_seconds(consumer.proc.pid)
        pg_before = _tree_cpu([postmaster])
        started = time.perf_counter()
        while consumer.ready()["lag"] != 0:
            if time.perf_counter() - started > 600:
                raise SystemExit(f"bench: the consumer did not drain in 600 s:\n{consumer.logs()}")
            time.sleep(0.2)
        drained = time.perf_counter() - started
        applied = _count(stream_db)
        c_spent = _cpu_seconds(consumer.proc.pid) - c_before
        pg_spent = _tree_cpu([postmaster]) - pg_before

        print(
            f"machine: 2 cores shared; wrk 1 thread and every server on it; {args.workers} HTTP "
            "worker(s) per node; NATS 3 servers, stream replicas 3, 8 shards; PostgreSQL fsync=on"
        )
        for label, result in results.items():
            c = cpu[label]
            print(result.line())
            print(
                f"   {result.requests_per_s * 100:,.0f} events/s acknowledged; CPU per event: "
                f"HTTP worker {c['http']:.1f} us, NATS {c['nats']:.1f} us, "
                f"PostgreSQL {c['pg']:.1f} us"
            )
        ratio = (
            results["stream (replicas 3)"].requests_per_s
            / results["direct PostgreSQL"].requests_per_s
        )
        print(f"stream / direct capture throughput: {ratio:.2f}")
        print(
            f"one consumer applied the {applied:,} queued events in {drained:.1f} s: "
            f"{applied / drained:,.0f} events/s; CPU per event: consumer "
            f"{c_spent / applied * 1e6:.1f} us, PostgreSQL {pg_spent / applied * 1e6:.1f} us"
        )
        _report_probes(streamed, args.probes, args.background)
    finally:
        if consumer is not None:
            consumer.stop()
        streamed.stop()
        direct.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
