"""Events per second through the pure ingestion rules: body decoding, envelope, normalization.

    python -m bench.ingest_rules [--batches N] [--repeat N]

Batches of 100 realistic events shaped like posthog-js (envelope with `api_key` and `sent_at`,
`distinct_id` and `token` inside properties, ~500 bytes) and posthog-python (top-level
`distinct_id`, microsecond ISO timestamps) sent as raw JSON and gzip. One process, one core: no
store, no HTTP. Prints the best of `--repeat` runs, and the decode and normalize shares.
"""

from __future__ import annotations

import argparse
import gzip
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from bench.ingest_inprocess import normalized
from flagstaff.http.payload import decode_body
from flagstaff.ingest.normalize import parse_envelope

BATCH_SIZE = 100
LIMIT = 20 * 1024 * 1024
TOKEN = "phc_benchmark0123456789abcdefghijklmnopqrstu"
_PAGES = ("/", "/pricing", "/docs/getting-started", "/blog/launch-week", "/signup")


def _iso_ms(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def js_event(rng: random.Random, sent: datetime) -> dict[str, Any]:
    """A posthog-js `$pageview` trimmed to its common properties (~500 bytes as JSON)."""
    device = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    path = rng.choice(_PAGES)
    moment = sent - timedelta(milliseconds=rng.randrange(5000))
    return {
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "event": "$pageview",
        "properties": {
            "$os": "Mac OS X",
            "$browser": "Chrome",
            "$device_type": "Desktop",
            "$current_url": f"https://app.example.com{path}",
            "$pathname": path,
            "$browser_version": 131,
            "$lib": "web",
            "$lib_version": "1.449.2",
            "$insert_id": f"{rng.getrandbits(64):016x}",
            "$time": moment.timestamp(),
            "distinct_id": device,
            "$device_id": device,
            "$referrer": "$direct",
            "$referring_domain": "$direct",
            "token": TOKEN,
        },
        "timestamp": _iso_ms(moment),
    }


def python_event(rng: random.Random, sent: datetime) -> dict[str, Any]:
    """A posthog-python `capture` with a few business properties (~400 bytes as JSON)."""
    moment = sent - timedelta(microseconds=rng.randrange(5_000_000))
    return {
        "properties": {
            "plan": rng.choice(("free", "pro", "enterprise")),
            "amount": round(rng.uniform(1, 500), 2),
            "items": rng.randrange(1, 10),
            "$groups": {"company": f"company-{rng.randrange(1000)}"},
            "$python_runtime": "CPython",
            "$python_version": "3.11.7",
            "$os": "Linux",
            "$lib": "posthog-python",
            "$lib_version": "7.91.1",
            "$geoip_disable": True,
            "$is_server": True,
        },
        "timestamp": moment.isoformat(),
        "distinct_id": f"user-{rng.randrange(100_000)}",
        "event": "order completed",
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    }


def make_body(
    kind: Callable[[random.Random, datetime], dict[str, Any]], seed: int, historical: bool
) -> bytes:
    rng = random.Random(seed)
    sent = datetime.now(UTC)
    envelope: dict[str, Any] = {
        "api_key": TOKEN,
        "batch": [kind(rng, sent) for _ in range(BATCH_SIZE)],
        "sent_at": _iso_ms(sent),
    }
    if historical:
        envelope["historical_migration"] = False
    return orjson.dumps(envelope)


def run_case(bodies: list[bytes], encoding: str | None, batches: int) -> tuple[float, float]:
    """Seconds spent decoding and normalizing `batches` bodies (cycling through `bodies`)."""
    decode_s = normalize_s = 0.0
    clock = time.perf_counter
    query: dict[str, str] = {}
    for i in range(batches):
        body = bodies[i % len(bodies)]
        started = clock()
        payload = decode_body(
            body,
            content_type="application/json",
            content_encoding=encoding,
            query=query,
            limit=LIMIT,
        )
        decoded = clock()
        env = parse_envelope(payload, query)
        now_ms = int(time.time() * 1000)
        if normalized(env, now_ms, "203.0.113.9")[1]:
            raise SystemExit("benchmark event was dropped")
        normalize_s += clock() - decoded
        decode_s += decoded - started
    return decode_s, normalize_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300, help="batches per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per case (best kept)")
    args = parser.parse_args()

    print(f"{'case':<22} {'bytes/event':>11} {'events/s':>10} {'decode us':>10} {'rules us':>9}")
    for name, kind, python_sdk in (
        ("posthog-js", js_event, False),
        ("posthog-python", python_event, True),
    ):
        raw_bodies = [make_body(kind, seed, python_sdk) for seed in range(8)]
        for encoding in (None, "gzip"):
            bodies = raw_bodies if encoding is None else [gzip.compress(b) for b in raw_bodies]
            best: tuple[float, float] | None = None
            for _ in range(args.repeat):
                result = run_case(bodies, encoding, args.batches)
                if best is None or sum(result) < sum(best):
                    best = result
            assert best is not None
            events = args.batches * BATCH_SIZE
            decode_us = best[0] / events * 1e6
            rules_us = best[1] / events * 1e6
            size = len(raw_bodies[0]) / BATCH_SIZE
            label = f"{name} {encoding or 'json'}"
            print(
                f"{label:<22} {size:>11.0f} {events / sum(best):>10,.0f} "
                f"{decode_us:>10.2f} {rules_us:>9.2f}"
            )


if __name__ == "__main__":
    main()
