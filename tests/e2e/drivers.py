"""Running the node driver scripts of ``tooling/`` and reading the JSON report they print."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.e2e.deps import TOOLING
from tests.e2e.traffic import SdkRequest
from tests.server import PERSONAL_KEY

DRIVER_TIMEOUT_S = 90.0


class DriverReport:
    def __init__(self, report: dict[str, Any]) -> None:
        self.results: dict[str, Any] = report.get("results") or {}
        self.requests = [SdkRequest.from_report(item) for item in report.get("requests", [])]
        self.raw = report

    def to(self, route: str) -> list[SdkRequest]:
        return [r for r in self.requests if r.route == route]


def run_driver(script: str, spec: dict[str, Any]) -> DriverReport:
    """Run ``node tooling/<script> '<spec as JSON>'``; its last stdout line is the report.

    Its TMPDIR is a folder removed afterwards: Chromium's profiles and playwright's artifacts
    go there, so nothing is left behind even when the browser is killed.
    """
    try:
        with tempfile.TemporaryDirectory(prefix="flagstaff-e2e-") as scratch:
            done = subprocess.run(
                ["node", script, json.dumps(spec)],
                cwd=TOOLING,
                env={**os.environ, "TMPDIR": scratch},
                capture_output=True,
                text=True,
                timeout=DRIVER_TIMEOUT_S,
                check=False,
            )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"node {script} timed out after {exc.timeout}s:\n{exc.stderr}")
    if done.returncode != 0:
        pytest.fail(f"node {script} exited with {done.returncode}:\n{done.stderr}\n{done.stdout}")
    lines = done.stdout.strip().splitlines()
    if not lines:
        pytest.fail(f"node {script} printed no report:\n{done.stderr}")
    return DriverReport(json.loads(lines[-1]))


def await_event(server_url: str, **params: str) -> dict[str, Any]:
    """A browser driver's ``awaitAfterLeave``: the events listing filtered by ``params`` (with
    the test project's personal key), polled after the page is left until it lists one. A
    beacon sent as the page closes is not a request the driver sees: this is where it lands."""
    return {
        "url": f"{server_url}/api/projects/@current/events/?{urlencode(params)}",
        "headers": {"Authorization": f"Bearer {PERSONAL_KEY}"},
    }
