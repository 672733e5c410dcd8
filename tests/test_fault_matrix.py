"""The fault matrix: a launch on the replay stack stopped on purpose at every stage
(LLMS_BENCHMARK_FAILPOINT), by a raised fault, SIGINT and SIGTERM, and by SIGKILL.

For raise / SIGINT / SIGTERM: the unit is destroyed, the ledger is empty, no process
the launch started is left (its process tree, sampled while it ran, by pid and start
time, never by name), and the run record says where and why it stopped (exit 3).
For SIGKILL: the next command that serves finds the orphan in the ledger, says so, and
destroys it (and the orphaned agent) before serving anything."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import Project, stop
from harness.sandbox import diskimage
from test_launch_e2e import SMALL_PROBE, _agents_of, assert_destroyed, dump

STAGES = ("preflight", "serve", "wait-ready", "probe", "configure", "smoke", "run", "destroy", "collect")
# A signal at `run` lands two seconds in, while opencode is running the mission.
DELAY = {"run": "@2"}
LAUNCH = ["launch", "local", "replay", "replay-hello", "--mission", "hello", *SMALL_PROBE]
# Every stage gets a raised fault and one signal. SIGINT and SIGTERM share one handler
# (harness/run/units.py routes both to the same unwind; test_units_signals checks it), so they
# alternate over the stages: each signal lands at half of them, both before and after the agent
# runs, and the matrix costs 18 launches where every pair would cost 27. The Azure matrix takes
# the other signal (`faults(1, ...)`) at the stages where the app has a state of its own.
def faults(offset: int = 0, stages: tuple[str, ...] = STAGES) -> list:
    return [pytest.param(stage, action, id=f"{stage}-{action}")
            for i, stage in enumerate(STAGES) if stage in stages
            for action in ("raise", ("sigint", "sigterm")[(i + offset) % 2])]


def test_units_signals_sigint_and_sigterm_unwind_through_one_handler():
    """Why one signal a stage is enough: a launch routes both to the same unwind, and puts back
    what was there when it ends."""
    import os
    import signal

    from harness.errors import Interrupted
    from harness.run.units import interruptible

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with pytest.raises(Interrupted) as caught, interruptible():
            assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM)
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises at the next bytecode: never slept through
        assert caught.value.signum == sig
    assert {s: signal.getsignal(s) for s in before} == before


class Tree:
    """Every descendant of a process, sampled until it exits: (pid, start time) pairs."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.root, self.seen = proc, set()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        deadline = time.monotonic() + 400
        while self.root.poll() is None and time.monotonic() < deadline:
            try:
                for child in psutil.Process(self.root.pid).children(recursive=True):
                    try:
                        self.seen.add((child.pid, child.create_time(), " ".join(child.cmdline())[:120]))
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    def alive(self, timeout_s: float = 15.0) -> list[str]:
        self.thread.join(timeout=10)
        deadline = time.monotonic() + timeout_s
        while True:
            left = []
            for pid, started, cmd in self.seen:
                try:
                    p = psutil.Process(pid)
                    if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                        left.append(f"{pid} {cmd}")
                except psutil.NoSuchProcess:
                    continue
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.3)


def launch_with(project: Project, failpoint: str, timeout: float = 300) -> tuple[int, str, str, Tree]:
    project.env["LLMS_BENCHMARK_FAILPOINT"] = failpoint
    proc = project.popen(LAUNCH)
    tree = Tree(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop(proc)
        pytest.fail(f"launch with {failpoint} ran past {timeout}s{dump(out, err)}")
    finally:
        project.env.pop("LLMS_BENCHMARK_FAILPOINT", None)
    return proc.returncode, out, err, tree


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(("stage", "action"), faults())
def test_every_stage_every_fault_destroys_and_records(project: Project, stage: str, action: str):
    code, out, err, tree = launch_with(project, f"{stage}:{action}{DELAY.get(stage, '') if action != 'raise' else ''}")
    run_dir, rec = project.only_run()
    assert project.ledger() == {}, dump(out, err)
    assert tree.alive() == [], dump(out, err)
    served = stage != "preflight"
    if served:
        assert rec["unit"] == "vot-replay-hello" and rec["times"]["destroyed"], dump(out, err)
        assert "destroyed vot-replay-hello" in err
    else:
        assert rec.get("unit") is None and not (project.root / ".vot" / "run" / "units.json").exists() \
            or project.ledger() == {}
    if stage == "destroy" and action == "raise":
        # A failed destroy is tried again; the run itself was whole.
        assert code == 0 and rec["status"] == "ok", dump(out, err)
        assert "destroy attempt 1 failed (failpoint destroy:raise); trying again" in " ".join(err.split())
        return
    if stage == "destroy":
        # A signal during the destroy: the destroy finishes first, and the trial, whose mission
        # finished, keeps its verdict (issue 61: a resume never serves a finished trial again).
        sig = {"sigint": "SIGINT", "sigterm": "SIGTERM"}[action]
        assert code == 0 and rec["status"] == "ok", dump(out, err)
        assert f"{sig} arrived during the destroy: the destroy finished first" in " ".join(err.split())
        return
    assert code == 3, dump(out, err)
    assert rec["status"] == "fault" and rec["stopped_at"] == stage, rec
    why = {"raise": f"failpoint {stage}:raise", "sigint": "SIGINT", "sigterm": "SIGTERM"}[action]
    assert why in rec["reason"], rec["reason"]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("stage", STAGES[1:])
def test_sigkill_at_every_stage_leaves_an_orphan_the_next_command_destroys(project: Project, stage: str):
    code, out, err, _ = launch_with(project, f"{stage}:sigkill{DELAY.get(stage, '')}")
    assert code == -9, dump(out, err)
    if stage == "collect":  # after the destroy: no unit left to orphan; the record says why it has no row
        assert project.ledger() == {} and "destroyed vot-replay-hello" in err, dump(out, err)
        _, rec = project.only_run()
        assert rec["status"] == "fault" and rec["stopped_at"] == "collect" and rec["times"]["destroyed"], rec
        assert "the collect did not finish" in rec["reason"], rec["reason"]
        return
    orphan = project.ledger().get("replay/vot-replay-hello")
    assert orphan is not None, "a SIGKILLed launch leaves its unit in the ledger"
    server = psutil.Process(orphan["pid"])
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    # The sandboxed agent dies with its launch (bubblewrap --die-with-parent): only the unit is orphaned.
    deadline = time.monotonic() + 15
    while _agents_of(orphan["extra"]["marker"]) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _agents_of(orphan["extra"]["marker"]) == []

    code, out, err = project.run_cli(["serve", "replay", "replay-hello"], timeout=120)
    assert code == 0, dump(out, err)
    flat = " ".join(err.split())
    assert "leftover unit vot-replay-hello on replay from a launch that died" in flat, err
    assert "vot-replay-hello destroyed; removed from the ledger" in flat, err
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    run_dir, rec = project.only_run()
    if stage == "destroy":
        # Its mission had finished (issue 61): the record keeps its collect pending, counted from the
        # cloud's clock, and `collect-pending` completes it without serving anything.
        assert rec["stopped_at"] == "collect" and "the collect did not finish" in rec["reason"], rec
        assert rec["times"]["destroyed"] and rec["gpu_hours"] is not None, rec
        if diskimage.available():  # as root the agent's folders were on a disk image: the sweep copied them back
            # Any command's start sweeps every dead launch's image: the other xdist worker's may have come first.
            image = f"{run_dir.name}-mission"
            assert f"swept a leftover agent disk image: {image}" in flat or not (diskimage.IMAGES / image).exists(), err
            assert (run_dir / "workspace").is_dir() and not os.path.ismount(run_dir / "workspace")
        code, out, err = project.run_cli(["destroy", "replay", "replay-hello"], timeout=60)
        assert code == 0 and project.ledger() == {}, dump(out, err)
        code, out, err = project.run_cli(["collect-pending", run_dir.name, "--json"], timeout=120)
        assert code == 0, dump(out, err)
        rec = json.loads((run_dir / "run.json").read_text())
        assert rec["status"] == "ok" and rec["session"]["turns"] > 0, rec.get("reason")
        assert not (run_dir / "collect-pending.json").exists()
        assert project.ledger() == {}
        return
    assert rec["status"] == "fault" and rec["stopped_at"] in (stage, "killed"), rec
    code, out, err = project.run_cli(["destroy", "replay", "replay-hello"], timeout=60)
    assert code == 0 and project.ledger() == {}, dump(out, err)


# -- a fault in a later trial of `launch --trials K` (one serve, K records) ---------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
# SIGINT and SIGTERM share one handler (see `faults`): one lands while trial two's agent runs,
# the other after it.
@pytest.mark.parametrize("failpoint", ["configure#2:raise", "run#2:raise", "run#2:sigint@2"])
def test_a_fault_in_trial_two_destroys_the_unit_and_leaves_trial_one_intact(project: Project, failpoint: str):
    project.env["LLMS_BENCHMARK_FAILPOINT"] = failpoint
    code, out, err = project.run_cli([*LAUNCH, "--trials", "3"], timeout=540)
    assert code == 3, dump(out, err)
    records = sorted(project.records(), key=lambda r: r["trial"]["index"])
    assert [r["trial"]["index"] for r in records] == [1, 2]  # trial 3 never started
    one, two = records
    assert one["status"] == "ok" and one["reason"] is None and one["run"]["report_found"], one["reason"]
    assert (project.runs_dir / one["run_id"] / "report.md").is_file()
    stage = failpoint.split("#")[0]
    assert two["status"] == "fault" and two["stopped_at"] == stage, two
    action = failpoint.split(":")[1].split("@")[0]
    assert (action.upper() if action != "raise" else f"failpoint {stage}:raise") in two["reason"], two["reason"]
    assert one["times"]["destroyed"] == two["times"]["destroyed"] and one["gpu_hours"] == two["gpu_hours"]
    assert_destroyed(project, two)
    assert "2 of 3 trials ran" in " ".join(err.split())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_signal_in_trial_two_s_collect_after_the_destroy_leaves_one_ok_and_three_uncollected(project: Project):
    """Every trial is collected after the one destroy: SIGTERM in trial two's collect ends it and
    trial three's (fault, the signal named); trial one, collected before, stands."""
    project.env["LLMS_BENCHMARK_FAILPOINT"] = "collect#2:sigterm"
    code, out, err = project.run_cli([*LAUNCH, "--trials", "3"], timeout=540)
    assert code == 3, dump(out, err)
    one, two, three = sorted(project.records(), key=lambda r: r["trial"]["index"])
    assert one["status"] == "ok" and one["reason"] is None, one["reason"]
    assert two["status"] == "fault" and two["stopped_at"] == "collect" and "SIGTERM" in two["reason"], two
    assert three["status"] == "fault" and three["stopped_at"] == "collect", three
    assert "not collected: interrupted by SIGTERM" in three["reason"], three["reason"]
    for rec in (one, two):  # collected after the destroy, never before
        assert rec["times"]["collected"] > rec["times"]["destroyed"], rec["times"]
    assert_destroyed(project, two)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_in_trial_two_the_next_command_destroys_and_closes_trial_two_only(project: Project):
    project.env["LLMS_BENCHMARK_FAILPOINT"] = "run#2:sigkill@2"
    proc = project.popen([*LAUNCH, "--trials", "3"])
    try:
        out, err = proc.communicate(timeout=540)
    finally:
        project.env.pop("LLMS_BENCHMARK_FAILPOINT", None)
    assert proc.returncode == -9, dump(out, err)
    assert project.ledger().get("replay/vot-replay-hello") is not None
    code, out, err = project.run_cli(["serve", "replay", "replay-hello"], timeout=120)
    assert code == 0 and "leftover unit vot-replay-hello" in " ".join(err.split()), dump(out, err)
    one, two = sorted(project.records(), key=lambda r: r["trial"]["index"])
    # trial one's collect comes after the destroy, which the kill never reached: no row, and it says so
    assert one["status"] == "fault" and "the collect did not finish" in one["reason"], one
    assert two["status"] == "fault" and "died without finishing" in two["reason"] and two["times"]["end"]
    code, out, err = project.run_cli(["destroy", "replay", "replay-hello"], timeout=60)
    assert code == 0 and project.ledger() == {}, dump(out, err)
