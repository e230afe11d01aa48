"""Counters and latency histograms, cheap on the hot path, summed across worker processes.

Each worker counts in plain dicts (a dict increment per request) and writes a snapshot to
``<data dir>/metrics/<pid>.json`` every second and at shutdown; ``/metrics`` sums the files
of every worker with the answering worker's live counts. The prometheus_client library's
multiprocess mode writes to an mmap on every increment, which costs more per request than
this whole module, and its files need the same clean-up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[str, int] = {}
        self.latency_counts: dict[str, list[int]] = {}
        self.latency_sums: dict[str, float] = {}
        self.events_ingested = 0
        self.events_duplicate = 0
        self.events_dropped: dict[str, int] = {}
        self.ingest_refused: dict[str, int] = {}
        self.flag_requests = 0
        self.flag_evaluations = 0
        self.flag_errors = 0
        self.flag_answers_reused = 0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        key = f"{route}\x00{status}"
        self.requests[key] = self.requests.get(key, 0) + 1
        counts = self.latency_counts.get(route)
        if counts is None:
            counts = self.latency_counts[route] = [0] * (len(LATENCY_BUCKETS) + 1)
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self.latency_sums[route] = self.latency_sums.get(route, 0.0) + seconds

    def count_drops(self, dropped: dict[str, int]) -> None:
        for reason, n in dropped.items():
            self.events_dropped[reason] = self.events_dropped.get(reason, 0) + n

    def count_refusal(self, reason: str) -> None:
        """An ingestion request answered 503 before anything was stored (``disk_reserve``)."""
        self.ingest_refused[reason] = self.ingest_refused.get(reason, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "latency_counts": self.latency_counts,
            "latency_sums": self.latency_sums,
            "events_ingested": self.events_ingested,
            "events_duplicate": self.events_duplicate,
            "events_dropped": self.events_dropped,
            "ingest_refused": self.ingest_refused,
            "flag_requests": self.flag_requests,
            "flag_evaluations": self.flag_evaluations,
            "flag_errors": self.flag_errors,
            "flag_answers_reused": self.flag_answers_reused,
        }


class MetricsFiles:
    """Where each worker leaves its snapshot for the others to sum."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / f"{os.getpid()}.json"
        self._last_write = 0.0

    def write(self, metrics: Metrics, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_write < 1.0:
            return
        self._last_write = now
        self.write_encoded(msgspec.json.encode(metrics.snapshot()))

    def write_encoded(self, snapshot: bytes) -> None:
        """Replace this worker's file with an encoded snapshot (file system calls only)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(snapshot)
        os.replace(tmp, self.path)

    def others(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.folder.is_dir():
            return out
        for path in self.folder.glob("*.json"):
            if path == self.path:
                continue
            try:
                out.append(msgspec.json.decode(path.read_bytes()))
            except (OSError, msgspec.DecodeError):
                continue
        return out


def _merge(snapshots: Iterable[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for snap in snapshots:
        for name, value in snap.items():
            if isinstance(value, dict):
                bucket = total.setdefault(name, {})
                for key, v in value.items():
                    if isinstance(v, list):
                        cur = bucket.setdefault(key, [0] * len(v))
                        bucket[key] = [a + b for a, b in zip(cur, v, strict=False)]
                    else:
                        bucket[key] = bucket.get(key, 0) + v
            else:
                total[name] = total.get(name, 0) + value
    return total


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(snapshots: Iterable[dict[str, Any]]) -> str:
    """Prometheus text exposition format (version 0.0.4)."""
    m = _merge(snapshots)
    lines = [
        "# HELP flagstaff_http_requests_total HTTP requests by route and status.",
        "# TYPE flagstaff_http_requests_total counter",
    ]
    for key, n in sorted(m.get("requests", {}).items()):
        route, status = key.split("\x00")
        lines.append(
            f'flagstaff_http_requests_total{{route="{_label(route)}",status="{status}"}} {n}'
        )
    lines += [
        "# HELP flagstaff_http_request_duration_seconds Request latency by route.",
        "# TYPE flagstaff_http_request_duration_seconds histogram",
    ]
    sums = m.get("latency_sums", {})
    for route, counts in sorted(m.get("latency_counts", {}).items()):
        label = _label(route)
        running = 0
        for bound, n in zip(LATENCY_BUCKETS, counts, strict=False):
            running += n
            lines.append(
                f'flagstaff_http_request_duration_seconds_bucket{{route="{label}",le="{bound}"}}'
                f" {running}"
            )
        running += counts[-1]
        lines.append(
            f'flagstaff_http_request_duration_seconds_bucket{{route="{label}",le="+Inf"}} {running}'
        )
        lines.append(f'flagstaff_http_request_duration_seconds_count{{route="{label}"}} {running}')
        lines.append(
            f'flagstaff_http_request_duration_seconds_sum{{route="{label}"}} {sums.get(route, 0.0)}'
        )
    lines += [
        "# HELP flagstaff_events_ingested_total Events durably stored.",
        "# TYPE flagstaff_events_ingested_total counter",
        f"flagstaff_events_ingested_total {m.get('events_ingested', 0)}",
        "# HELP flagstaff_events_duplicate_total Events not stored again: their uuid was known.",
        "# TYPE flagstaff_events_duplicate_total counter",
        f"flagstaff_events_duplicate_total {m.get('events_duplicate', 0)}",
        "# HELP flagstaff_events_dropped_total Events answered 200 but not ingested, by reason.",
        "# TYPE flagstaff_events_dropped_total counter",
    ]
    for reason, n in sorted(m.get("events_dropped", {}).items()):
        lines.append(f'flagstaff_events_dropped_total{{reason="{_label(reason)}"}} {n}')
    lines += [
        "# HELP flagstaff_ingest_refused_total Ingestion requests refused with 503, by reason.",
        "# TYPE flagstaff_ingest_refused_total counter",
    ]
    for reason, n in sorted(m.get("ingest_refused", {}).items()):
        lines.append(f'flagstaff_ingest_refused_total{{reason="{_label(reason)}"}} {n}')
    lines += [
        "# HELP flagstaff_flag_requests_total Flag evaluation requests answered.",
        "# TYPE flagstaff_flag_requests_total counter",
        f"flagstaff_flag_requests_total {m.get('flag_requests', 0)}",
        "# HELP flagstaff_flag_evaluations_total Individual flag results computed.",
        "# TYPE flagstaff_flag_evaluations_total counter",
        f"flagstaff_flag_evaluations_total {m.get('flag_evaluations', 0)}",
        "# HELP flagstaff_flag_errors_total Flag requests answered with errorsWhileComputingFlags.",
        "# TYPE flagstaff_flag_errors_total counter",
        f"flagstaff_flag_errors_total {m.get('flag_errors', 0)}",
        "# HELP flagstaff_flag_answers_reused_total Flag requests answered from a worker's"
        " answer cache (the same request since nothing it read changed).",
        "# TYPE flagstaff_flag_answers_reused_total counter",
        f"flagstaff_flag_answers_reused_total {m.get('flag_answers_reused', 0)}",
    ]
    return "\n".join(lines) + "\n"


def render_consumer(stats: dict[str, Any]) -> str:
    """The metrics of one ``flagstaff consume`` process (its snapshot of
    :class:`~flagstaff.stream.consumer.ConsumerStats`), Prometheus text format."""
    rows = (
        (
            "stream_events_ingested_total",
            "counter",
            "Events the consumer stored.",
            "events_ingested",
        ),
        (
            "stream_events_duplicate_total",
            "counter",
            "Events not stored again: their uuid was stored already (redelivery, SDK retry).",
            "events_duplicate",
        ),
        ("stream_events_dropped_total", "counter", "Events the rules refused.", "events_dropped"),
        ("stream_messages_total", "counter", "Stream messages applied.", "messages"),
        (
            "stream_transactions_total",
            "counter",
            "PostgreSQL transactions committed.",
            "transactions",
        ),
        (
            "stream_transaction_retries_total",
            "counter",
            "Transactions run again after racing another consumer.",
            "transaction_retries",
        ),
        (
            "stream_failed_commits_total",
            "counter",
            "Commits that failed (PostgreSQL unreachable) and were retried.",
            "failed_commits",
        ),
        (
            "stream_dead_letters_total",
            "counter",
            "Messages moved to the dead-letter subject (refused by PostgreSQL, undecodable).",
            "dead_letters",
        ),
        (
            "stream_consumer_lag_messages",
            "gauge",
            "Messages of the stream, all shards, not yet applied and acknowledged.",
            "lag",
        ),
        (
            "stream_queue_delay_seconds",
            "gauge",
            "From capture's publish to the commit, for the last message committed.",
            "queue_delay_seconds",
        ),
    )
    lines: list[str] = []
    for name, kind, help_text, key in rows:
        lines += [
            f"# HELP flagstaff_{name} {help_text}",
            f"# TYPE flagstaff_{name} {kind}",
            f"flagstaff_{name} {stats.get(key, 0)}",
        ]
    lines += [
        "# HELP flagstaff_stream_shards_owned Shards this process reads.",
        "# TYPE flagstaff_stream_shards_owned gauge",
        f"flagstaff_stream_shards_owned {len(stats.get('shards', []))}",
    ]
    return "\n".join(lines) + "\n"
