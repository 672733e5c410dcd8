"""Local process units: the ledger, destroy by marker and process group, leftovers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.run.units import destroy_leftovers, plan_unit, start_unit
from harness.run.preflight import Preflight
from harness.stacks.base import GpuCell
from harness.stacks.ledger import Ledger
from harness.stacks.local_process import LocalProcessStack, processes_with_marker
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


class SleeperStack(LocalProcessStack):
    """A unit whose process spawns a grandchild and ignores SIGTERM, the hard case."""

    name = "replay"
    stop_grace_s = 1.0

    def command(self, env, preset, port):
        code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)")
        return [sys.executable, "-c", code]


def _fixtures(tmp_path: Path):
    env = Environment(name="replay", stack="replay", config={"port": 0}, path=tmp_path / "replay.yaml")
    preset = ResolvedPreset(name="sleeper", model="m", served_name="sleeper", gpu_memory_gb=1, vllm_args={},
                            env=[], stack="replay", path=tmp_path / "sleeper.yaml", sha256="0")
    stack = SleeperStack(tmp_path)
    return Preflight(env, preset, stack, GpuCell("test", 0), None, None, None), stack


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_unit_is_in_the_ledger_and_destroy_kills_the_whole_tree(tmp_path):
    pf, stack = _fixtures(tmp_path)
    ledger = Ledger(tmp_path)
    unit = start_unit(pf, plan_unit(pf, ledger, owner=True), ledger)
    marker = unit.extra["marker"]
    assert ledger.get("replay", "vot-sleeper").pid == unit.pid
    assert _wait_for(lambda: len(processes_with_marker(marker)) == 2)  # the server and its grandchild
    assert stack.destroy(unit) is True
    ledger.remove(unit)
    assert processes_with_marker(marker) == []
    assert ledger.all() == []
    assert stack.destroy(unit) is False  # idempotent: a missing unit is reported, not an error


def test_leftover_of_a_dead_launch_is_destroyed_first(tmp_path):
    pf, stack = _fixtures(tmp_path)
    ledger = Ledger(tmp_path)
    unit = start_unit(pf, plan_unit(pf, ledger, owner=False), ledger)
    # Pretend a launch that has since died owned it (a PID that no longer exists).
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    unit.extra.update(owner_pid=dead.pid, owner_started=0.0)
    unit.pid = None  # killed before its PID was recorded: found by marker alone
    ledger.update(unit)
    messages: list[str] = []
    assert destroy_leftovers(tmp_path, messages.append) == ["vot-sleeper"]
    assert any("leftover unit vot-sleeper" in m for m in messages)
    assert processes_with_marker(unit.extra["marker"]) == []
    assert ledger.all() == []


def test_units_served_by_hand_are_not_leftovers(tmp_path):
    pf, stack = _fixtures(tmp_path)
    ledger = Ledger(tmp_path)
    unit = start_unit(pf, plan_unit(pf, ledger, owner=False), ledger)
    try:
        assert destroy_leftovers(tmp_path, lambda m: None) == []
        assert processes_with_marker(unit.extra["marker"])
    finally:
        stack.destroy(unit)
        ledger.remove(unit)


def test_a_reused_pid_is_never_signalled(tmp_path):
    """A stranger that took a dead unit's PID lacks the marker: destroy leaves it alone."""
    pf, stack = _fixtures(tmp_path)
    stranger = psutil.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        unit = stack.plan(pf.env, pf.preset)
        unit.pid = stranger.pid
        assert stack.destroy(unit) is False
        assert stranger.is_running() and stranger.status() != psutil.STATUS_ZOMBIE
    finally:
        stranger.kill()
        stranger.wait()


def test_port_taken_is_refused_naming_the_port(tmp_path):
    import socket

    from harness.errors import PreflightError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = Environment(name="replay", stack="replay", config={"port": port}, path=tmp_path / "replay.yaml")
        with pytest.raises(PreflightError, match=f"port {port}"):
            SleeperStack(tmp_path).check_port(env)
