"""The quickstart examples in examples/ work against a fresh server, as a new user runs them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.deps import ARRAY_JS, NODE_MODULES
from tests.e2e.drivers import await_event, run_driver
from tests.e2e.site import Site
from tests.e2e.state import ProjectState
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _env(server: Server) -> dict[str, str]:
    return {
        **os.environ,
        "FLAGSTAFF_URL": server.url,
        "FLAGSTAFF_TOKEN": PROJECT_TOKEN,
        "FLAGSTAFF_PERSONAL_KEY": PERSONAL_KEY,
    }


def _run(command: list[str], server: Server, cwd: Path) -> str:
    done = subprocess.run(
        command, env=_env(server), cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _assert_quickstart_outcome(mgmt: Api, output: str, user: str, first_event: str) -> None:
    assert f"new-checkout for {user}: true" in output.lower(), output
    assert "new-checkout for someone-else: false" in output.lower(), output
    assert re.search(r"checkout opened", output), output
    state = ProjectState.read(mgmt)
    assert state.names() == Counter(
        {
            (first_event, user): 2,
            ("checkout opened", user): 2,
            ("$feature_flag_called", user): 2,
            ("$feature_flag_called", "someone-else"): 2,
        }
    )
    assert state.person(user)["properties"]["plan"] == "pro"
    flags = mgmt.get("/api/projects/@current/feature_flags/").json()["results"]
    assert [f["key"] for f in flags] == ["new-checkout"]
    assert state.warnings == []


def test_python_example(flagstaff: Server, mgmt: Api) -> None:
    script = EXAMPLES / "python" / "quickstart.py"
    assert len(script.read_text().splitlines()) < 40
    output = ""
    for _ in range(2):  # a second run finds the flag in place
        output = _run([sys.executable, str(script)], flagstaff, EXAMPLES.parent)
    _assert_quickstart_outcome(mgmt, output, "quickstart-user", "$set")


@pytest.mark.usefixtures("node_tooling")
def test_node_example(flagstaff: Server, mgmt: Api, tmp_path: Path) -> None:
    script = EXAMPLES / "node" / "quickstart.mjs"
    assert len(script.read_text().splitlines()) < 40
    # As after `npm install` in examples/node: the same posthog-node the suite pins.
    shutil.copy(script, tmp_path / script.name)
    (tmp_path / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    output = ""
    for _ in range(2):
        output = _run(["node", script.name], flagstaff, tmp_path)
    _assert_quickstart_outcome(mgmt, output, "quickstart-node", "$identify")


@pytest.mark.usefixtures("chromium")
def test_web_example(flagstaff: Server, mgmt: Api) -> None:
    page = (EXAMPLES / "web" / "index.html").read_bytes()
    assert len(page.decode().splitlines()) < 40
    cdn = re.search(rb'src="(https://cdn\.jsdelivr\.net/npm/posthog-js@([^/]+)/[^"]+)"', page)
    assert cdn is not None
    pinned = (NODE_MODULES / "posthog-js" / "package.json").read_text()
    assert f'"version": "{cdn[2].decode()}"' in pinned, "the page must load the tested release"
    mgmt.create_flag(key="welcome-banner", filters={"groups": [{"rollout_percentage": 100}]})

    with Site() as site:
        url = site.add("/index.html", page)
        report = run_driver(
            "e2e_browser_sdk.mjs",
            {
                "pageUrl": f"{url}?token={PROJECT_TOKEN}&host={flagstaff.url}",
                "apiOrigin": flagstaff.url,
                # The CDN is answered with the same file from node_modules (no network here).
                "files": {cdn[1].decode(): str(ARRAY_JS)},
                "readyWhen": "document.getElementById('flags').textContent.startsWith('{')",
                "click": "#send",
                "collect": "JSON.parse(document.getElementById('flags').textContent)",
                # the $pageleave beacon, sent as the page closes
                "awaitAfterLeave": await_event(flagstaff.url, event="$pageleave"),
            },
        )
    assert report.raw["problems"] == []
    assert report.results == {"welcome-banner": True}
    state = ProjectState.read(mgmt)
    visitor = state.only("$pageview")["distinct_id"]
    assert state.names() == Counter(
        {
            ("$pageview", visitor): 1,
            ("$autocapture", visitor): 1,
            ("test button clicked", visitor): 1,
            ("$pageleave", visitor): 1,
        }
    )
    assert state.only("test button clicked")["properties"]["page"] == "quickstart"
    state.assert_no_person(visitor)  # posthog-js keeps anonymous visitors personless
    assert state.warnings == []
