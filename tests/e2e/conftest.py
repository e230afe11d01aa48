"""Fixtures of the end-to-end suite: a fresh server per scenario and the SDK tooling checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import deps
from tests.server import Api, Server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def flagstaff(tmp_path: Path) -> Iterator[Server]:
    """The real server on a free port and an empty data dir, for one scenario."""
    srv = Server(data_dir=tmp_path / "data").start()
    try:
        yield srv
    finally:
        srv.stop()
    assert srv.log_path is not None
    failures = [
        line
        for line in srv.log_path.read_text(errors="replace").splitlines()
        if '"level":"error"' in line or '"level":"critical"' in line or "Traceback" in line
    ]
    assert not failures, "the server logged errors:\n" + "\n".join(failures)


@pytest.fixture
def mgmt(flagstaff: Server) -> Iterator[Api]:
    api = Api(flagstaff.url)
    try:
        yield api
    finally:
        api.client.close()


@pytest.fixture(scope="session")
def node_tooling() -> None:
    deps.require(deps.node_tooling_problems())


@pytest.fixture(scope="session")
def chromium(node_tooling: None) -> None:
    deps.require(deps.chromium_problems())
