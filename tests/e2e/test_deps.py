"""The suite's tooling checks fail loudly, naming the install command, and never skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e import deps


def test_missing_node_modules_fail_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deps, "NODE_MODULES", tmp_path / "node_modules")
    monkeypatch.setattr(deps, "ARRAY_JS", tmp_path / "node_modules" / "array.full.js")
    problems = deps.node_tooling_problems()
    assert len(problems) == len(deps.NPM_PACKAGES) + 1, problems
    with pytest.raises(pytest.fail.Exception) as failed:
        deps.require(problems)
    assert "bash scripts/install-e2e-deps.sh" in str(failed.value)
    assert "posthog-node" in str(failed.value)


def test_a_wrong_installed_version_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "node_modules"
    for name in deps.NPM_PACKAGES:
        (fake / name).mkdir(parents=True)
        (fake / name / "package.json").write_text('{"version": "0.0.1"}')
    monkeypatch.setattr(deps, "NODE_MODULES", fake)
    problems = deps.node_tooling_problems()
    assert any("posthog-js 0.0.1 is installed" in p for p in problems), problems


def test_missing_chromium_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "CHROMIUM", tmp_path / "chromium")
    problems = deps.chromium_problems()
    assert problems and str(tmp_path / "chromium") in problems[0]


def test_the_installed_tooling_is_complete() -> None:
    assert deps.node_tooling_problems() == []
    assert deps.chromium_problems() == []
