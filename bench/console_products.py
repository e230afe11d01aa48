"""The console's experiment pages over HTTP with 100 experiments and 1M exposed persons.

    python -m bench.console_products [--experiments 100] [--persons 1000000] [--repeat 20]
                                     [--postgres]

The server (``flagstaff serve``, 2 workers, SQLite or a fresh PostgreSQL database) gets
``--experiments`` launched experiments through the API, each with three metrics (a mean, a
funnel, a ratio: ``bench.experiments.definition``), and 2,000 events (what the metric form
reads for its suggestions). One more experiment gets the aggregates of ``--persons`` exposed
persons, built by the pure accumulator and written straight into the aggregate tables, as
``bench.experiments_store`` does (a page reads only the totals). A console user logs in and
each page is fetched ``--repeat`` times after one warm-up: the median and p95 wall time, the
Flagstaff processes' CPU time per request, the page size (``bench.console_http.measure``).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time

import httpx
import msgspec
from tests.server import PROJECT_TOKEN

from bench.console_http import console_server, log_in, measure
from bench.experiments import definition
from bench.experiments_store import (
    _build_state,
    _fill_postgres,
    _fill_sqlite,
    _results_body,
)
from bench.load import CpuMeter
from flagstaff.experiments.exposure import ExperimentSpec
from flagstaff.experiments.model import parse_experiment

EXPERIMENTS = "/api/projects/@current/experiments/"


def _experiments(api: httpx.Client, count: int) -> None:
    for n in range(count):
        body = msgspec.to_builtins(definition(n))
        body.update(
            name=f"Experiment {n}",
            feature_flag_key=f"bench-page-{n}",
            start_date="2024-01-01T00:00:00Z",
        )
        made = api.post(EXPERIMENTS, json=body)
        assert made.status_code == 201, made.text


def _events(url: str, count: int) -> None:
    names = ("purchase", "cart", "signup", "$pageview")
    batch = [
        {
            "event": names[n % len(names)],
            "distinct_id": f"visitor-{n % 500}",
            "properties": {"amount": n % 90, "plan": "pro" if n % 3 else "free"},
        }
        for n in range(count)
    ]
    answer = httpx.post(f"{url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
    assert answer.status_code == 200, answer.text


def _big_experiment(api: httpx.Client, database_url: str | None, srv: object, persons: int) -> int:
    started = time.perf_counter()
    _spec, state = _build_state(persons)
    print(f"aggregates of {persons:,} persons built in {time.perf_counter() - started:.0f} s")
    body = _results_body()
    made = api.post(EXPERIMENTS, json=body)
    assert made.status_code == 201, made.text
    eid = int(made.json()["id"])
    fingerprint = ExperimentSpec(eid, parse_experiment(body)).fingerprint
    if database_url:
        asyncio.run(_fill_postgres(database_url, eid, fingerprint, state))
    else:
        _fill_sqlite(srv, eid, fingerprint, state)  # type: ignore[arg-type]
    return eid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    srv, engine, api = console_server(args.postgres, timeout=120)
    try:
        started = time.perf_counter()
        _experiments(api, args.experiments - 1)
        _events(srv.url, 2000)
        print(f"{args.experiments - 1} experiments in {time.perf_counter() - started:.0f} s")
        eid = _big_experiment(api, srv.env.get("FLAGSTAFF_DATABASE_URL"), srv, args.persons)
        results = api.get(f"{EXPERIMENTS}{eid}/results/").json()
        assert sum(results["exposures"].values()) == args.persons, results["exposures"]
        client = log_in(srv.url)
        page = client.get(f"/experiments/{eid}")
        assert f"{args.persons:,}" in page.text, "the page does not show the exposed persons"
        assert srv.proc is not None
        meter = CpuMeter(srv.proc.pid)
        pages = ["/experiments", f"/experiments/{eid}", "/experiments/new"]
        rows = [measure(client, meter, path, args.repeat) for path in pages]
    finally:
        srv.stop()
    print(
        f"\n{engine}, {args.experiments} experiments, {args.persons:,} exposed persons in one, "
        f"{args.repeat} requests per page after one warm-up; {platform.node()}"
    )
    print(f"{'page':<32} {'median':>8} {'p95':>8} {'CPU/req':>8} {'size':>9}")
    for t in rows:
        print(
            f"{t.page:<32} {t.median_ms:6.1f} ms {t.p95_ms:6.1f} ms {t.cpu_ms:6.1f} ms "
            f"{t.kib:6.1f} KiB"
        )


if __name__ == "__main__":
    main()
