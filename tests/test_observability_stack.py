"""End to end: the real telemetry store + the shop stack + a 10 s scenario; every service has
data in all four signals and the answer key's evidence holds on that data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
MISSION = ROOT / "missions" / "observability"
sys.path.insert(0, str(MISSION / "infra"))

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not (ROOT / "harness" / "telemetry" / "receiver.py").exists(), reason="no telemetry store"),
]

SERVICES = ("shop-api", "shop-mcp", "shop-agent")
TABLES = ("spans", "metrics", "logs", "profiles")


def _start_store(db: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.telemetry.receiver", "--db", str(db), "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    line = proc.stdout.readline().strip()
    assert "listening on" in line, line
    return proc, line.split()[-1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def test_stack_scenario_signals_and_key(tmp_path):
    from stack import start_stack

    store, url = _start_store(tmp_path / "store.duckdb")
    stack = None
    try:
        stack = start_stack(url, tmp_path / "stack")
        drive = tmp_path / "drive.json"
        # 20 s: as k6, no iteration starts after the duration, so on a loaded box a 10 s drive
        # could end before any shopper met a low-stock product (T02's rejected orders).
        run = subprocess.run(
            [sys.executable, "-m", "scenario", "run", "--duration", "20", "--vus", "2", "--out", str(drive)],
            cwd=MISSION / "workspace", env={**os.environ, **stack.env()}, capture_output=True, text=True, timeout=120,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert drive.exists()
        codes = stack.stop()
        stack = None
        assert all(code == 0 for name, code in codes.items() if name != "model"), codes

        def q(sql):
            return httpx.post(f"{url}/query", json={"sql": sql}, timeout=30).json()["rows"]

        for table in TABLES:
            have = {row[0] for row in q(f"SELECT DISTINCT service FROM {table}")}
            assert set(SERVICES) <= have, (table, have)

        selftest = subprocess.run(
            [sys.executable, str(MISSION / "key" / "selftest.py"), "--store", url, "--short"],
            capture_output=True, text=True, timeout=60,
        )
        assert selftest.returncode == 0, selftest.stdout + selftest.stderr
    finally:
        if stack is not None:
            stack.stop(grace_s=5)
        _stop(store)
