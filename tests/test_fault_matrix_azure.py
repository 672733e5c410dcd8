"""The fault matrix (tests/test_fault_matrix.py) on the azure stack: the real Azure SDK
against the loopback ARM server (tests/fakes/arm_server.py), a launch stopped on purpose
at every stage where the app is in a state of its own (AZURE_STAGES) by a raised fault and a
signal, and by SIGKILL at a few stages.

For raise / SIGINT / SIGTERM: the app is deleted in the fake ARM's own state (a DELETE it
answered, the app gone from it), the ledger is empty, no process the launch started is
left (its process tree sampled by pid and start time), and the run record says where and
why it stopped (exit 3; destroy:raise is retried and the run is whole: exit 0).
For SIGKILL: the app outlives the launch in the fake ARM; the next `serve` finds the
orphan in the ledger, says so, deletes the app (and ends the orphaned opencode) before
it serves anything.

Cost: every case is a whole `launch` on a loaded machine, so each is made as cheap as it
honestly can be: the `hello` mission, a small long-context probe, a trajectory with no
scripted think time, a fake ARM that provisions, boots and deletes in 0.1 s, and ARM
polling every 0.5 s (faster polling only burns CPU that opencode needs).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import Project, quick_trajectory, stop
from test_azure_stack import APP, ENV, PRESET, arm  # noqa: F401  (arm: the fixture)
from test_fault_matrix import DELAY, Tree, faults
from test_launch_e2e import SMALL_PROBE, _agents_of, dump
from fakes.arm_server import FakeArm

LAUNCH = ["launch", "local", ENV, PRESET, "--mission", "hello", *SMALL_PROBE]
KEY = f"{ENV}/{APP}"
# The stages where the app is in a state of its own: none yet (preflight), being created (serve),
# provisioning (wait-ready), first answering (probe), answering the agent (run), being deleted
# (destroy). At configure, smoke and collect the app is as it is at probe or run, and what unwinds
# is the launch's own code, the same on every stack: the local matrix stops there (every stage,
# a raise and a signal). Each launch here costs a whole serve; these three cost 56 s of `make test`.
AZURE_STAGES = ("preflight", "serve", "wait-ready", "probe", "run", "destroy")
# SIGKILL while serving, while an unsandboxed agent still talks to the app (the next serve must end
# it), and while deleting. A sandboxed agent dies with its launch on every stack (the local matrix's
# SIGKILL at run checks it), so that case is not repeated here.
SIGKILL_CASES = ("serve", "run-unsandboxed", "destroy")


@pytest.fixture
def azure(project: Project, arm: FakeArm, tmp_path: Path) -> FakeArm:  # noqa: F811
    """The fake ARM, tuned for many short launches whose opencode reaches the app over HTTP."""
    b = arm.behaviour
    b.trajectory = quick_trajectory(tmp_path / "hello-quick.yaml")
    b.vllm_tls = False  # opencode trusts only public CAs: the app speaks plain HTTP here
    b.provision_s = b.boot_s = b.delete_s = 0.1
    project.env["LLMS_BENCHMARK_AZURE_INGRESS_SCHEME"] = "http"
    project.env["LLMS_BENCHMARK_AZURE_POLL_S"] = "0.5"
    return arm


def launch_with(project: Project, failpoint: str, extra: list[str] = (), timeout: float = 240,
                ) -> tuple[int, str, str, Tree]:
    project.env["LLMS_BENCHMARK_FAILPOINT"] = failpoint
    proc = project.popen([*LAUNCH, *extra])
    tree = Tree(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop(proc)
        pytest.fail(f"launch with {failpoint} ran past {timeout}s{dump(out, err)}")
    finally:
        project.env.pop("LLMS_BENCHMARK_FAILPOINT", None)
    return proc.returncode, out, err, tree


def deleted_in_arm(fake: FakeArm, times: int = 1) -> None:
    """The app is gone from the fake ARM because a DELETE removed it (not just from our ledger)."""
    assert fake.app(APP) is None, f"{APP} still exists in the fake ARM"
    assert fake.deleted.count(APP) == times, f"created {fake.created}, deleted {fake.deleted}"
    deletes = [d["status"] for d in fake.calls("DELETE", APP)]
    assert deletes and deletes[-1] == 202, f"DELETE answers: {deletes}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("stage", "action"), faults(1, AZURE_STAGES))
def test_every_stage_every_fault_deletes_the_app_and_records(project: Project, azure: FakeArm, stage: str,
                                                             action: str):
    delay = DELAY.get(stage, "") if action != "raise" else ""
    code, out, err, tree = launch_with(project, f"{stage}:{action}{delay}")
    run_dir, rec = project.only_run()
    assert project.ledger() == {}, dump(out, err)
    assert tree.alive() == [], dump(out, err)
    if stage == "preflight":
        assert not azure.calls("PUT", "containerApps") and not azure.created, "preflight created an app"
        assert rec.get("unit") is None
    else:
        assert azure.created == [APP], azure.created
        deleted_in_arm(azure)
        assert rec["unit"] == APP and rec["stack"] == "azure" and rec["times"]["destroyed"], dump(out, err)
        assert f"destroyed {APP}" in err, dump(out, err)
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
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", SIGKILL_CASES)
def test_sigkill_leaves_the_app_the_next_serve_deletes(project: Project, azure: FakeArm, tmp_path: Path, case: str):
    stage, unsandboxed = case.removesuffix("-unsandboxed"), case.endswith("-unsandboxed")
    if stage == "run":  # the mission's first request stalls: its opencode would wait on the app
        azure.behaviour.trajectory = quick_trajectory(tmp_path / "hello-stall.yaml", stall_mission_s=120)
    code, out, err, tree = launch_with(project, f"{stage}:sigkill{DELAY.get(stage, '')}",
                                       ["--no-sandbox"] if unsandboxed else [])
    assert code == -9, dump(out, err)
    orphan = project.ledger().get(KEY)
    assert orphan is not None, "a SIGKILLed launch leaves its unit in the ledger"
    assert azure.app(APP) is not None and APP not in azure.deleted, "the app outlives a SIGKILLed launch"
    marker = orphan["extra"]["marker"]
    if stage == "run":
        assert any("opencode" in cmd for _, _, cmd in tree.seen), f"the mission never started: {tree.seen}"
        if unsandboxed:  # orphaned, still waiting on the app
            assert _agents_of(marker), "the unsandboxed opencode died with its launch"
        else:  # bubblewrap --die-with-parent: the sandboxed agent dies with its launch
            deadline = time.monotonic() + 15
            while _agents_of(marker) and time.monotonic() < deadline:
                time.sleep(0.3)
            assert _agents_of(marker) == []

    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=120)
    assert code == 0, dump(out, err)
    flat = " ".join(err.split())
    assert f"leftover unit {APP} on {ENV} from a launch that died" in flat, err
    assert f"{APP} destroyed; removed from the ledger" in flat, err
    assert ("ended its orphaned opencode" in flat) == unsandboxed, err
    assert _agents_of(marker) == []
    # The orphan was deleted in ARM (DELETE answered, gone) before the new app was created.
    assert azure.deleted == [APP] and azure.created == [APP, APP], f"created {azure.created}, deleted {azure.deleted}"
    puts = [p["t"] for p in azure.calls("PUT", f"containerApps/{APP}")]
    deletes = azure.calls("DELETE", APP)
    assert deletes and deletes[-1]["status"] == 202 and puts[0] < deletes[0]["t"] < puts[-1], (puts, deletes)
    assert tree.alive() == [], "a process of the SIGKILLed launch survived the next serve"

    run_dir, rec = project.only_run()
    if stage == "destroy":  # its mission had finished: its collect is pending, never a fault of its own (issue 61)
        assert rec["stopped_at"] == "collect" and "the collect did not finish" in rec["reason"], rec
        assert rec["times"]["destroyed"] and rec["gpu_hours"] is not None, rec
        assert (run_dir / "collect-pending.json").is_file()
    else:
        assert rec["status"] == "fault" and rec["stopped_at"] in (stage, "killed"), rec
        assert "a later command destroyed its unit" in rec["reason"], rec["reason"]

    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=60)
    assert code == 0 and project.ledger() == {}, dump(out, err)
    deleted_in_arm(azure, times=2)
