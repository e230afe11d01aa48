"""Survey stats aggregator: the cost of folding in an event, of keeping the state as bytes, and
of the reads (stats, summary), for one survey with many responses.

A store that keeps ``SurveyStats`` next to the survey pays ``add`` per survey event at ingest,
and ``decode`` + ``encode`` per batch unless it keeps the decoded state in memory (the SQLite
ingest writer can; PostgreSQL nodes decode per batch). Prints the best of several runs.

Run: ``python -m bench.survey_stats [responses]``
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from flagstaff.surveys import stats

QUESTIONS = [
    {"id": "q-rate", "type": "rating", "question": "How likely?", "scale": 10},
    {"id": "q-why", "type": "single_choice", "question": "Why?", "choices": ["Price", "Speed"]},
    {"id": "q-more", "type": "open", "question": "Anything else?"},
]
T0 = 1_777_600_000_000


def _events(responses: int) -> list[tuple[str, dict[str, Any], str, int, str]]:
    listed = [{"id": q["id"], "question": q["question"]} for q in QUESTIONS]
    events = []
    for i in range(responses):
        events.append((stats.SHOWN, {"$survey_id": "s"}, f"p{i}", T0 + i * 1000, f"s{i}"))
        answers = {
            "$survey_id": "s",
            "$survey_questions": listed,
            "$survey_submission_id": f"sub{i}",
            "$survey_response_q-rate": i % 11,
            "$survey_response_q-why": "Price" if i % 2 else "Speed",
            "$survey_response_q-more": f"answer {i}",
        }
        events.append((stats.SENT, answers, f"p{i}", T0 + i * 1000 + 5, f"u{i}"))
    return events


def _best(fn: Callable[[], Any], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main(responses: int) -> None:
    events = _events(responses)

    def fold() -> stats.SurveyStats:
        state = stats.SurveyStats()
        for name, props, person, ms, uuid in events:
            state.add(name, props, person=person, timestamp_ms=ms, uuid=uuid)
        return state

    state = fold()
    data = stats.encode(state)
    print(f"{responses} responses, {len(events)} events, state {len(data) / 1e6:.2f} MB")
    print(f"add        {_best(fold, 3) / len(events) * 1e6:8.1f} us/event")
    print(f"encode     {_best(lambda: stats.encode(state)) * 1e3:8.1f} ms")
    print(f"decode     {_best(lambda: stats.decode(data)) * 1e3:8.1f} ms")
    print(f"stats_json {_best(lambda: stats.stats_json(state)) * 1e3:8.1f} ms")
    print(f"summary    {_best(lambda: stats.summary(state, QUESTIONS)) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
