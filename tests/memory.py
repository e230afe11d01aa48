"""What the cache-bound tests share: the memory a fill leaves held, and stored persons."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable

import msgspec


def held_after(fill: Callable[[], object]) -> int:
    """Bytes of Python memory still allocated after ``fill()`` ran (tracemalloc), garbage
    collected before and after."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def stored_persons(count: int, seed: int = 1) -> list[tuple[str, bytes]]:
    """``count`` (distinct id, stored JSON properties) pairs of the shape ``$set`` stores."""
    rng = random.Random(seed)
    return [
        (
            f"person-{n}",
            msgspec.json.encode(
                {
                    "email": f"user{n}@example.com",
                    "country": rng.choice(["US", "GB", "DE"]),
                    "plan": rng.choice(["free", "pro"]),
                    "age": rng.randint(12, 80),
                    "beta": rng.random() < 0.5,
                    "app_version": f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.0",
                    "name": f"User {n}",
                }
            ),
        )
        for n in range(count)
    ]
