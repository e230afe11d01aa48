"""Milliseconds to build the console's pages from plain data: the flags list and the editor.

    python -m bench.console_pages [--flags N] [--repeat N]

Rendering only (views + Jinja2 templates), one process: no store, no HTTP. N flags with two
condition sets, a few filters each, a third of them multivariate with payloads, tags and usage.
Prints the best of ``--repeat`` runs for: the unfiltered list, a searched list, and the editor
of the largest flag (with N flags offered as dependencies).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import msgspec

from flagstaff.console import templates, views
from flagstaff.console.routes import STATIC_URL, ProjectInfo
from flagstaff.flags.records import FeatureFlag

NOW = 1_800_000_000_000


def make_flag(i: int, rng: random.Random) -> dict[str, Any]:
    filters: dict[str, Any] = {
        "groups": [
            {
                "properties": [
                    {"key": "email", "type": "person", "operator": "icontains", "value": "@corp"},
                    {
                        "key": "plan",
                        "type": "person",
                        "operator": "exact",
                        "value": ["pro", "team"],
                    },
                ],
                "rollout_percentage": rng.choice([10, 50, 100]),
            },
            {"properties": [], "rollout_percentage": rng.choice([0, 5, 25])},
        ],
        "payloads": {},
    }
    if i % 3 == 0:
        filters["multivariate"] = {
            "variants": [
                {"key": "control", "name": "Control", "rollout_percentage": 50},
                {"key": "test", "name": "Test", "rollout_percentage": 50},
            ]
        }
        filters["payloads"] = {"control": '{"color": "blue"}', "test": '{"color": "green"}'}
    return {
        "id": i,
        "key": f"flag-{i:05d}",
        "name": f"Flag number {i}",
        "active": i % 7 != 0,
        "deleted": False,
        "filters": filters,
        "tags": [f"team-{i % 12}", "web" if i % 2 else "server"],
        "version": 1 + i % 5,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-06-01T00:00:00Z",
    }


def _base() -> dict[str, Any]:
    return {
        "user": {"email": "ada@example.com"},
        "csrf_token": "x" * 64,
        "project": ProjectInfo(1, "Default project"),
        "role": "editor",
        "static_url": STATIC_URL,
        "nav": "flags",
    }


def best_ms(run: Callable[[], str], repeat: int) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        size = len(run())
        best = min(best, time.perf_counter() - started)
    return best * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--flags", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(7)
    flags = [make_flag(i, rng) for i in range(1, args.flags + 1)]
    usage = {
        f["key"]: views.FlagUsage(rng.random() * 1000, NOW - rng.randrange(60) * views.DAY_MS)
        for f in flags
    }

    def listing(query: dict[str, str]) -> Callable[[], str]:
        def run() -> str:
            filters = views.ListFilters.from_query(query)
            rows = views.flag_rows(flags, usage, filters, NOW)
            return templates.render(
                "flags.html",
                **_base(),
                filters=filters,
                rows=rows,
                total=len(flags),
                tags=views.all_tags(flags),
                can_edit=True,
            )

        return run

    def editor() -> str:
        builder = {
            "group_types": [(0, "company"), (1, "team")],
            "cohorts": [{"id": i, "name": f"Cohort {i}"} for i in range(50)],
            "other_flags": [{"id": f["id"], "key": f["key"]} for f in flags[1:]],
            "property_keys": [f"prop_{i}" for i in range(200)],
        }
        return templates.render(
            "flag_edit.html",
            **_base(),
            flag=views.editor_model(msgspec.convert(flags[0], FeatureFlag)),
            ctx=builder,
            can_edit=True,
        )

    for name, run in (
        ("flags list, all", listing({})),
        ("flags list, search", listing({"search": "flag-001", "active": "true"})),
        ("flag editor", editor),
    ):
        ms, size = best_ms(run, args.repeat)
        print(f"{name:<20} {ms:8.2f} ms   {size / 1024:8.1f} KiB   ({args.flags} flags)")


if __name__ == "__main__":
    main()
