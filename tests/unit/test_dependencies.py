"""Every third-party module the service imports is a runtime dependency in pyproject.toml.

The test extras install more (httpx came with them), so an import of a package that only the
tests declare works under pytest and fails for a user whose install is runtime-only
(``make run``). This reads the imports from the source and checks them against the declared
dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        _normalized(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0])
        for spec in project["dependencies"]
    }


def _imported_top_levels() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "src" / "flagstaff").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("flagstaff", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_a_runtime_dependency() -> None:
    declared = _runtime_dependencies()
    distributions = importlib.metadata.packages_distributions()
    imported = _imported_top_levels()
    assert "granian" in imported and "httpx" in imported  # the scan sees the imports
    undeclared = {
        module: sorted(paths)
        for module, paths in imported.items()
        if not declared.intersection(_normalized(d) for d in distributions.get(module, [module]))
    }
    assert undeclared == {}, f"imported but not in [project] dependencies: {undeclared}"
