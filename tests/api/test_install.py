"""The wheel, as `pip install .` makes it: built without packaging warnings, installed into a
fresh venv, and `flagstaff serve` from there answers on an empty data dir.

The fresh venv borrows the test venv's third-party packages through a ``.pth`` line (so the
test needs no network and stays fast), but not its editable flagstaff: a path listed in a
``.pth`` file is put on ``sys.path`` without running the ``.pth`` files found there, and the
test checks that ``flagstaff`` is imported from the fresh venv.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx

from tests.server import free_port

ROOT = Path(__file__).resolve().parents[2]
# Installed by setup scripts, never part of the package.
_NOT_PACKAGED = shutil.ignore_patterns("geoip", "docs", "__pycache__", "*.egg-info")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGSTAFF_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else setuptools warns that it skips byte-compiling
    return env


def _build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src" / "flagstaff", source / "src" / "flagstaff", ignore=_NOT_PACKAGED)
    dist = tmp / "dist"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta; build_meta.build_wheel({str(dist)!r})",
        ],
        cwd=source,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # setuptools' own warnings, not file names that hold the word (ingestion_warnings.html)
    warnings = [
        line
        for line in output.splitlines()
        if "warn" in line.lower() and not line.lstrip().startswith(("adding '", "copying "))
    ]
    assert warnings == [], output
    (wheel,) = dist.glob("flagstaff-*.whl")
    return wheel


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=120,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "borrowed-dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    where = subprocess.run(
        [str(python), "-c", "import flagstaff; print(flagstaff.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), where
    return venv


def test_the_wheel_installs_and_serves(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    venv = _fresh_venv(tmp_path, wheel)
    port = free_port()
    log_path = tmp_path / "serve.log"
    serve = [str(venv / "bin" / "flagstaff"), "serve", "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*serve, "--data-dir", str(tmp_path / "data")],
            cwd=tmp_path,
            env=_clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{base}/_health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        assert httpx.get(f"{base}/_health").json() == {"status": "ok"}
        assert httpx.get(f"{base}/_ready").json() == {"status": "ok"}
        lines = [json.loads(line) for line in log_path.read_text().splitlines()]
        token = next(line["project_token"] for line in lines if "project_token" in line)
        r = httpx.post(f"{base}/flags?v=2", json={"api_key": token, "distinct_id": "u1"})
        assert r.status_code == 200 and r.json()["flags"] == {}, r.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, log_path.read_text()
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    banner = next(line for line in lines if "url" in line)
    if banner["geoip"] == "off":  # no database where an installed package looks: said clearly
        assert any("no GeoIP database found" in line["msg"] for line in lines), lines
    assert not any(line["level"] == "error" for line in lines), lines
