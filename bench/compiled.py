"""Compiled hot paths (mypyc, Cython), measured against the pure-Python modules.

``build`` copies ``src`` into a scratch folder and compiles the hot modules there in place (an
extension module is imported before the ``.py`` beside it); ``count`` runs the in-process
benchmarks under callgrind on the pure tree and each compiled one, and prints instructions
per event or per request with their change, and checks that the outputs are the same::

    python -m venv /tmp/cvenv --system-site-packages && /tmp/cvenv/bin/pip install mypy Cython
    export BENCH_PYTHON=.venv/bin/python  # the service's packages, for mypy's types
    /tmp/cvenv/bin/python -m bench.compiled build mypyc /tmp/tree-mypyc
    /tmp/cvenv/bin/python -m bench.compiled build cython /tmp/tree-cython
    python -m bench.flags_inprocess fill /tmp/flags-data
    python -m bench.compiled count /tmp/flags-data /tmp/tree-mypyc /tmp/tree-cython

(``BENCH_ONLY=/flags`` or ``BENCH_ONLY=event`` counts one path only.)

The modules compiled: the ingestion rules (normalisation, validation, the person and group
rules, the writer's plan and hand-off) and the flag engine's static helpers (the code it
generates per flag set is compiled by Python at run time and stays interpreted).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BASE_PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
"""The service's interpreter, whose packages' types mypy reads (the scratch one builds)."""
INGEST_MODULES = (
    "flagstaff/ingest/normalize.py",
    "flagstaff/ingest/uuids.py",
    "flagstaff/ingest/validate.py",
    "flagstaff/ingest/persons.py",
    "flagstaff/ingest/groups.py",
    "flagstaff/ingest/event_names.py",
    "flagstaff/store/sqlite/protocol.py",
    "flagstaff/store/sqlite/ingest.py",
    "flagstaff/store/sqlite/person_cache.py",
)
FLAG_MODULES = (
    "flagstaff/flags/engine.py",
    "flagstaff/flags/runtime.py",
    "flagstaff/flags/operators.py",
    "flagstaff/flags/hashing.py",
    "flagstaff/flags/values.py",
    "flagstaff/flags/semver.py",
    "flagstaff/flags/regex.py",
    "flagstaff/flags/dates.py",
    "flagstaff/flags/context.py",
    "flagstaff/flags/cohorts.py",
    "flagstaff/flags/compiled_flag.py",
)
MYPYC_SKIPS = ("flagstaff/flags/engine.py",)
"""Left interpreted under mypyc: its native classes cannot be weakly referenced (the engine
releases a version's generated sources with ``weakref.finalize``)."""
# (benchmark argv prefix, small size, large size, units per size step, unit)
COUNTS = (
    (["bench.ingest_inprocess", "worker"], 20, 120, 100, "event (worker)"),
    (["bench.ingest_inprocess", "writer"], 20, 120, 100, "event (worker + writer)"),
    (["bench.flags_inprocess", "run", "{data}"], 50, 250, 1, "/flags request"),
)


def build(tool: str, out: Path) -> None:
    """Copy ``src`` to ``out/src`` and compile the hot modules there with ``tool``."""
    src = out / "src"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(ROOT / "src", src, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    modules = [*INGEST_MODULES, *FLAG_MODULES]
    if tool == "mypyc":
        modules = [m for m in modules if m not in MYPYC_SKIPS]
        cmd = [sys.executable, "-m", "mypyc", "--ignore-missing-imports"]
        cmd += ["--python-executable", _BASE_PYTHON]
        # mypy does not narrow ``type(x) is Drop`` away from a union, nor a list unpacked
        # into fixed parameters: silenced here, each is still checked at run time by mypyc.
        for code in ("arg-type", "union-attr", "call-arg"):
            cmd += ["--disable-error-code", code]
        cmd += modules
    elif tool == "cython":
        cmd = [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-3", "-j", "2", *modules]
    else:
        raise SystemExit(f"unknown tool {tool!r} (mypyc or cython)")
    subprocess.run(cmd, cwd=src, check=True, stdout=subprocess.DEVNULL)
    built = sorted(str(p.relative_to(src)) for p in (src / "flagstaff").rglob("*.so"))
    print(f"{tool}: {len(built)} extension modules in {src}")


def _instructions(tree: Path, argv: list[str]) -> int:
    # A fixed hash seed: set and dict orders (and so the instructions) differ between seeds.
    env = {**os.environ, "PYTHONPATH": f"{tree}:{ROOT}", "PYTHONHASHSEED": "0"}
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*valgrind, sys.executable, "-m", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))  # type: ignore[union-attr]


def _output(tree: Path, argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": f"{tree}:{ROOT}", "BENCH_DIGEST": "1"}
    done = subprocess.run(
        [sys.executable, "-m", *argv], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def count(data: Path, trees: list[Path], only: str = "") -> None:
    """Instructions per unit on the pure tree and on each compiled tree, interleaved."""
    named = [("pure", ROOT / "src"), *((t.name, t / "src") for t in trees)]
    for prefix, small, large, per, unit in COUNTS:
        if only and only not in unit:
            continue
        argv = [a.format(data=data) for a in prefix]
        outputs = {name: _output(tree, [*argv, str(small)]) for name, tree in named}
        same = len(set(outputs.values())) == 1
        base = 0.0
        for name, tree in named:
            low = _instructions(tree, [*argv, str(small)])
            high = _instructions(tree, [*argv, str(large)])
            each = (high - low) / ((large - small) * per)
            base = base or each
            change = "" if name == "pure" else f" ({(each / base - 1) * 100:+.1f}%)"
            print(f"{unit:<24} {name:<14} {each:>10,.0f} instructions{change}", flush=True)
        print(f"{unit:<24} same output: {same} ({outputs['pure']})", flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "build":
        build(sys.argv[2], Path(sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "count":
        count(Path(sys.argv[2]), [Path(t) for t in sys.argv[3:]], os.environ.get("BENCH_ONLY", ""))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
