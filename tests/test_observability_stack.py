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
    pytest.mark.timeout(420),  # up to DRIVE_TRIES drives of 20 s on a loaded box
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

    from observed_drive import COLLISIONS, DRIVE_TRIES

    store, url = _start_store(tmp_path / "store.duckdb")
    stack = None

    def q(sql):
        return httpx.post(f"{url}/query", json={"sql": sql}, timeout=30).json()["rows"]

    try:
        # B01 is a race (tests/observed_drive.py): a drive on a loaded box may place no two orders
        # at once (CI, 2026-12-04: 14 of 15 found, B01 not). Drive again, into the same store,
        # until it shows: the key's other evidence holds on any drive of the unfixed stack.
        for attempt in range(DRIVE_TRIES):
            stack = start_stack(url, tmp_path / f"stack-{attempt}")
            drive = tmp_path / f"drive-{attempt}.json"
            # 20 s, not 10: the scenario starts no iteration after its duration, so on a loaded
            # 2-core box a 10 s drive ran too few orders to reach a rejected one (T02 not found).
            run = subprocess.run(
                [sys.executable, "-m", "scenario", "run", "--duration", "20", "--vus", "2", "--out", str(drive)],
                cwd=MISSION / "workspace", env={**os.environ, **stack.env()}, capture_output=True, text=True,
                timeout=120,
            )
            assert run.returncode == 0, run.stderr[-2000:]
            assert drive.exists()
            codes = stack.stop()
            stack = None
            assert all(code == 0 for name, code in codes.items() if name != "model"), codes
            if q(COLLISIONS)[0][0]:
                break

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
