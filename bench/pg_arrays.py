"""Client CPU of array parameters in asyncpg, against the same values as one text.

    python -m bench.pg_arrays [--size 680] [--calls 300]

asyncpg checks every element of an array parameter against ``collections.abc`` in Python
(``_is_array_iterable``); a statement that splits one comma-separated text
(``string_to_array``) sends one value instead. Each line is this process's CPU time per call
(best of three runs), on a fresh test database (``tests.pg``: the machine's PostgreSQL, or one
started for the run).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import asyncpg
from tests.pg import new_database


async def _main(size: int, calls: int) -> None:
    conn = await asyncpg.connect(new_database())
    uuids = [str(uuid.uuid4()) for _ in range(size)]
    ids = list(range(size))
    cases: list[tuple[str, str, Any]] = [
        ("nothing", "SELECT 1", None),
        (f"uuid[] of {size}", "SELECT cardinality($1::uuid[])", uuids),
        (f"text[] of {size}", "SELECT cardinality($1::text[])", uuids),
        (f"bigint[] of {size}", "SELECT cardinality($1::bigint[])", ids),
        (
            f"{size} uuids as one text",
            "SELECT cardinality(string_to_array($1, ',')::uuid[])",
            ",".join(uuids),
        ),
        (
            f"{size} bigints as one text",
            "SELECT cardinality(string_to_array($1, ',')::bigint[])",
            ",".join(map(str, ids)),
        ),
    ]
    try:
        for label, query, value in cases:
            args = () if value is None else (value,)
            await conn.fetchval(query, *args)
            best = float("inf")
            for _ in range(3):
                began = time.process_time()
                for _ in range(calls):
                    await conn.fetchval(query, *args)
                best = min(best, (time.process_time() - began) / calls)
            print(f"{best * 1e6:8.1f} µs client CPU per call: {label}")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=680)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(_main(args.size, args.calls))


if __name__ == "__main__":
    main()
