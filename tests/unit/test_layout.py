"""The package's shape: a short root, no import circle between its modules, and imports
between its packages only in the directions of :data:`MAY_IMPORT`.

Imports are read from the source (module level and inside functions alike); imports under
``if TYPE_CHECKING:`` are left out, as they never run.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "flagstaff"
ROOT_MODULES_MAX = 8

_PURE = {"common", "flags", "accounts", "ingest", "activity", "experiments", "surveys"}
_BELOW_ADAPTERS = _PURE | {"ops", "store", "stream", "application", "server", "flagstaff"}
MAY_IMPORT: dict[str, set[str]] = {
    # the pure rules: the flag engine, the ingestion rules, the products' definitions
    "common": set(),
    "flags": {"common"},
    "accounts": {"common"},
    "ingest": {"common", "accounts"},
    "activity": {"common", "accounts"},
    "experiments": {"common", "flags", "ingest", "activity"},
    "surveys": {"common", "flags"},
    "ops": {"common"},
    # storage, the event stream, the use cases, the running service
    "store": _PURE | {"ops"},
    "stream": _PURE | {"ops", "store"},
    "application": _PURE | {"ops", "store"},
    "server": _PURE | {"ops", "store", "stream", "application", "flagstaff"},
    # the adapters: each uses what is below it, none of the others
    "http": _BELOW_ADAPTERS,
    "console": _BELOW_ADAPTERS,
    "cli": _BELOW_ADAPTERS,
    # the application root
    "app": _BELOW_ADAPTERS | {"http", "console"},
    "__main__": {"cli"},
}
"""Each package (or root module) of ``flagstaff`` and the packages it may import.
``flagstaff`` itself is the package's ``__init__`` (its version)."""


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return skipped


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Each module of the package to the modules of the package it imports."""
    modules = _module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets.update(subs)
                if len(subs) < len(node.names):
                    targets.add(base)  # names defined in the module (or package) itself
        found = {_resolve(t, modules) for t in targets if t.split(".")[0] == "flagstaff"}
        graph[name] = {t for t in found if t is not None and t != name}
    return graph


def test_the_graph_sees_imports() -> None:
    graph = import_graph()
    assert "flagstaff.http.admin_context" in graph["flagstaff.http.admin"]
    assert "flagstaff.server.config" in graph["flagstaff.server.services"]


def test_no_import_circle() -> None:
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")


def test_a_circle_is_found() -> None:
    graph = import_graph()
    graph["flagstaff.server.config"].add("flagstaff.server.services")
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


def test_the_root_holds_entry_points_and_the_app_only() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES_MAX, root
    assert {"__init__.py", "__main__.py", "app.py"} <= set(root)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "flagstaff"


def package_imports(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) to the module imports that make that edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            edge = (_package(module), _package(target))
            if edge[0] != edge[1]:
                edges.setdefault(edge, []).append(f"{module} -> {target}")
    return edges


def test_every_package_is_in_the_direction_table() -> None:
    packages = {_package(m) for m in import_graph()} - {"flagstaff"}
    assert packages == set(MAY_IMPORT), packages ^ set(MAY_IMPORT)


def test_packages_import_only_downwards() -> None:
    wrong = {
        f"{importer} may not import {imported}: {', '.join(sorted(found))}"
        for (importer, imported), found in package_imports(import_graph()).items()
        if imported not in MAY_IMPORT.get(importer, set())
    }
    assert not wrong, "\n".join(sorted(wrong))


def test_an_upward_import_is_found() -> None:
    graph = import_graph()
    graph["flagstaff.server.jobs"].add("flagstaff.http.admin")
    edges = package_imports(graph)
    assert "http" not in MAY_IMPORT["server"] and ("server", "http") in edges


def _store_calls(source: str) -> list[str]:
    """Calls of a store method made through a caller (``ctx.store.get_flag(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in ("store", "accounts")
            and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == "ctx"
        ):
            found.append(f"{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_management_handlers_reach_the_store_only_through_use_cases() -> None:
    """A management handler decodes, calls a use case and renders: it never calls the store
    (``ctx.store``, ``ctx.accounts``) itself."""
    offenders = {
        path.name: calls
        for path in sorted((PACKAGE / "http").glob("admin*.py"))
        if (calls := _store_calls(path.read_text()))
    }
    assert not offenders, offenders


def test_a_handler_calling_the_store_is_found() -> None:
    source = "async def h(ctx, request):\n    return await ctx.store.list_flags(1, 2, 3)\n"
    assert _store_calls(source) == ["2: ctx.store.list_flags"]


_STORES = ("store", "accounts")
"""A store held as an attribute (``self.store``, ``self.pages.accounts``); a bare ``store``
is the store passed in (``accounts`` bare is the application module of that name)."""


def _console_store_calls(source: str) -> list[str]:
    """Calls of a method on a store (``self.store.get_flag(...)``, ``store.list_events(...)``,
    ``data.store.x(...)``, ``self.pages.accounts.list_members(...)``): anything named
    ``store`` or ``accounts`` whose method is called."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id == "store") or (
                isinstance(owner, ast.Attribute) and owner.attr in _STORES
            ):
                found.append(f"{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_console_reads_the_store_only_through_use_cases() -> None:
    """The console's pages and their data classes read through the application layer
    (``application/``'s read functions and use cases, ``accounts/``' sign-in steps): no
    console module calls a method on the store or the accounts store itself."""
    offenders = {
        str(path.relative_to(PACKAGE)): calls
        for path in sorted((PACKAGE / "console").rglob("*.py"))
        if (calls := _console_store_calls(path.read_text()))
    }
    assert not offenders, offenders


def test_a_console_store_call_is_found() -> None:
    source = (
        "async def f(self, store, data):\n"
        "    await self.store.get_flag(1, 2)\n"
        "    await store.list_events(1, q)\n"
        "    await data.store.definitions(1)\n"
        "    await people.stored_person(self.store, 1, 'd')\n"
        "    await self.pages.accounts.list_members(1)\n"
    )
    assert _console_store_calls(source) == [
        "2: self.store.get_flag",
        "3: store.list_events",
        "4: data.store.definitions",
        "6: self.pages.accounts.list_members",
    ]


_LIFECYCLE = {"open", "close", "ping"}
"""What a command or a job may ask of the store itself: opening, closing and checking it."""


def test_the_cli_and_the_jobs_reach_the_store_only_through_use_cases() -> None:
    """A command and a background job (scheduled changes, sessions' housekeeping, webhook
    deliveries, the guardrail watch) call the application layer; of the store they only open,
    close and ping it. The retention pass is the store's own maintenance and is not one of
    these."""
    adapters = [
        *sorted((PACKAGE / "cli").glob("*.py")),
        *(PACKAGE / "server" / name for name in _JOBS),
    ]
    offenders = {
        str(path.relative_to(PACKAGE)): calls
        for path in adapters
        if (
            calls := [
                call
                for call in _console_store_calls(path.read_text())
                if call.rsplit(".", 1)[1] not in _LIFECYCLE
            ]
        )
    }
    assert not offenders, offenders


_JOBS = ("jobs.py", "webhook_delivery.py", "guardrail_watch.py")


def test_no_module_imports_another_modules_private_names() -> None:
    """``from flagstaff.x import _name`` reaches into another module's privates: what two
    modules share is public in one of them."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flagstaff"):
                private = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if private:
                    offenders.append(f"{path.relative_to(PACKAGE)}: {node.module} {private}")
    assert not offenders, offenders
