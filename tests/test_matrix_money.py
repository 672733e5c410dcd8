"""The matrix's money and its resume, against the loopback ARM (tests/fakes/arm_server.py) with
the real console script, each cell a real `launch local` process (tests/fakes/matrix_cell.py
stands in for the agent). The environment's price is $3600/GPU-h: one GPU-second reads as $1.

- a crash of every process (matrix and launch, SIGKILL) with a 1-GPU quota: the resume sweeps
  the leftover before it reads the quota, counts its life as the cloud reports it, keeps the
  trial that finished and serves only the missing one;
- a quota full at start queues the cells (said on screen and in the state) and serves them
  once it frees; one that stays full is given up after the bounded looks, nothing served;
- a launch killed on its own while the matrix runs: its unit swept at once, counted, retried;
- a running cell that would pass the budget is stopped (asked at its report, then interrupted):
  spent <= budget by the records and by the server's log of app lives;
- a revision that never became ready is retried with backoff; a fatal start is not;
- `--display plain`: a status line every N seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import datetime

import pytest

from conftest import Project, stop
from fakes.arm_server import FakeArm
from test_azure_stack import arm  # noqa: F401 - the fake ARM fixture
from test_launch_e2e import dump
from test_matrix_azure import (  # noqa: F401 - the plan fixture
    assert_no_app_left, assert_trials_kept, cells, cloud_spent, plan, records_spent, state_of, write_plan)

REPORT = (".llms-benchmark", "matrices", "four", "report.md")


def runs_of(project: Project, preset: str) -> list[dict]:
    out = []
    for path in sorted(project.runs_dir.glob(f"*-{preset}-*/run.json")):
        out.append(json.loads(path.read_text()))
    return out


def report_spent(project: Project) -> float:
    text = project.root.joinpath(*REPORT).read_text()
    return float(re.search(r"GPU spent: \$([0-9.]+)", text).group(1))


def state_spent(state: dict) -> float:
    return sum(a["gpu_hours"] for c in state["cells"] for a in c["attempts"]) * state["gpu_hourly_usd"]


def app_lives(arm: FakeArm, name: str) -> list[float]:
    born, lives = None, []
    for t, what, app in sorted(arm.app_log):
        if app != name:
            continue
        if what == "created":
            born = t
        elif born is not None:
            lives.append(t - born)
            born = None
    return lives


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.timeout(400)
def test_a_crash_of_every_process_with_a_one_gpu_quota_is_swept_counted_and_resumed_by_trial(
        plan: Project, arm: FakeArm):  # noqa: F811
    arm.behaviour.gpu_quota, arm.behaviour.enforce_quota = 1, True
    write_plan(plan, presets=["mx-a", "mx-b"], parallel=1)
    plan.env["MATRIX_CELL_TRIAL_S"] = "3.0"
    proc = plan.popen(["matrix", "four"])
    try:
        # Trial 1 of mx-a finished and trial 2 runs: then SIGKILL the matrix and its launch.
        def second_trial_running():
            return any(r.get("trial") and r["trial"]["index"] == 2 and r["times"].get("mission_start")
                       for r in runs_of(plan, "mx-a"))
        arm.wait_for(second_trial_running, timeout_s=120)
        launch_pid = next(c for c in state_of(plan)["cells"] if c["preset"] == "mx-a")["attempts"][-1]["pid"]
        kill_group(launch_pid)  # the launch first, so PR_SET_PDEATHSIG finds nobody to save the app
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            stop(proc)
    time.sleep(1.0)
    assert "vot-mx-a" in arm.apps, "the crash left no app billing: the scenario did not happen"
    assert plan.ledger(), "the leftover is in the ledger"

    plan.env["MATRIX_CELL_TRIAL_S"] = "0.3"
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    flat = " ".join(err.split())
    assert "swept vot-mx-a before the matrix" in flat and "no A100 GPU free" not in flat, dump(out, err)
    assert flat.index("swept vot-mx-a") < flat.index("GPU quota:"), "the quota was read before the sweep"
    # Trial 1's mission had finished (trial 2's too, if the kill landed in the destroy): what its
    # collect needs was on disk before the next trial (issue 61), so the resume collects it and
    # serves only the trials whose missions had not finished.
    done_before = int(re.search(r"(\d) of 2 trial\(s\) finished, the rest run again", flat).group(1))
    assert done_before >= 1, dump(out, err)
    state = json.loads(out)
    a, b = cells(state)["mx-a"], cells(state)["mx-b"]
    assert a["status"] == b["status"] == "done", state
    ok = assert_trials_kept(plan, a)
    assert_trials_kept(plan, b)
    assert len({r["run_id"] for r in ok}) == 2
    # One serve per launch: a second only for a trial whose mission had not finished.
    puts = [c["status"] for c in arm.calls("PUT", "containerApps/vot-mx-a")]
    assert puts == [201] * (1 + (done_before < 2)), puts
    assert len(runs_of(plan, "mx-a")) == 2 + (done_before < 2)  # never 4: no finished trial is run twice
    # A trial killed in its mission: closed by the sweep, its life counted from the cloud's createdAt.
    killed = [r for r in runs_of(plan, "mx-a") if r["status"] == "fault"]
    assert len(killed) == (done_before < 2), killed
    assert all("died without finishing" in r["reason"] for r in killed)
    leftover_life = app_lives(arm, "vot-mx-a")[0]
    first_serve_s = a["attempts"][0]["gpu_hours"] * 3600
    assert first_serve_s >= leftover_life - 0.05, (first_serve_s, leftover_life)
    assert first_serve_s <= leftover_life + 5.0, (first_serve_s, leftover_life)
    # Every GPU-second counted, the same to the cent in the state, the report and the records.
    spent = records_spent(plan, state)
    assert round(state_spent(state), 2) == round(spent, 2) == round(report_spent(plan), 2), (state_spent(state), spent)
    assert spent >= cloud_spent(arm) - 0.2, (spent, cloud_spent(arm))
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_quota_full_at_start_queues_the_cells_then_serves_them(plan: Project, arm: FakeArm):  # noqa: F811
    arm.behaviour.gpu_quota, arm.behaviour.gpu_used_elsewhere, arm.behaviour.enforce_quota = 1, 1, True
    write_plan(plan, presets=["mx-a"], trials=1, retry={"backoff_s": 1, "backoff_max_s": 1, "max_attempts": 30})
    plan.env["MATRIX_CELL_TRIAL_S"] = "0.3"
    proc = plan.popen(["matrix", "four", "--json"])
    try:
        def queued():
            try:
                cell = state_of(plan)["cells"][0]
            except (FileNotFoundError, ValueError, IndexError):
                return None
            return cell if cell["status"] == "queued" else None
        cell = arm.wait_for(queued, timeout_s=60)
        assert cell["reason"].startswith("queued: the GPU quota is full (0 of 1 A100 GPUs free"), cell
        time.sleep(1.5)
        assert not arm.created, "a cell was served while the quota was full"
        arm.behaviour.gpu_used_elsewhere = 0  # someone else's app went away
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 0, dump(out, err)
    assert "queued: the GPU quota is full" in err and "the queued cells start" in err, dump(out, err)
    assert cells(json.loads(out))["mx-a"]["status"] == "done"
    assert arm.created == ["vot-mx-a"]
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(120)
def test_a_quota_that_stays_full_is_given_up_after_bounded_looks(plan: Project, arm: FakeArm):  # noqa: F811
    arm.behaviour.gpu_quota, arm.behaviour.gpu_used_elsewhere = 1, 1
    write_plan(plan, presets=["mx-a", "mx-b"], trials=1, retry={"backoff_s": 0.2, "backoff_max_s": 0.2,
                                                                 "max_attempts": 3})
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=90)
    assert code == 1, dump(out, err)
    state = json.loads(out)
    assert [c["status"] for c in state["cells"]] == ["gave-up", "gave-up"], state
    assert "the GPU quota stayed full" in state["cells"][0]["reason"]
    assert len(arm.calls("GET", "/locations/swedencentral/usages")) == 4  # preflight + 3 looks, no more
    assert not arm.created


@pytest.mark.timeout(300)
def test_a_launch_killed_under_the_matrix_is_swept_counted_and_retried(plan: Project, arm: FakeArm):  # noqa: F811
    write_plan(plan, presets=["mx-a"], trials=1)
    plan.env["MATRIX_CELL_TRIAL_S"] = "3.0"
    proc = plan.popen(["matrix", "four", "--json"])
    try:
        arm.wait_for(lambda: (a := arm.apps.get("vot-mx-a")) is not None and a.ready, timeout_s=60)
        time.sleep(0.5)
        kill_group(state_of(plan)["cells"][0]["attempts"][0]["pid"])
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 0, dump(out, err)
    assert "swept vot-mx-a, left by its launch (exit code -9)" in err, dump(out, err)
    state = json.loads(out)
    a = state["cells"][0]
    assert a["status"] == "done" and len(a["attempts"]) == 2, a
    assert a["attempts"][0]["reason"].startswith("transient: the launch process was killed by SIGKILL")
    assert a["attempts"][0]["gpu_hours"] * 3600 >= app_lives(arm, "vot-mx-a")[0] - 0.05
    spent = records_spent(plan, state)
    assert round(state_spent(state), 2) == round(spent, 2) == round(report_spent(plan), 2)
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_running_cell_is_stopped_before_the_budget_is_passed(plan: Project, arm: FakeArm):  # noqa: F811
    """Its bound ($3 + $0.5 + $0.5 + $0.60 + $2 = $6.60) fits $9, but its mission runs 20 s past
    the cap: asked to stop at its report, then interrupted while its serve and destroy still fit."""
    write_plan(plan, presets=["mx-a"], trials=1)
    plan.env["MATRIX_CELL_TRIAL_S"] = "20.0"
    code, out, err = plan.run_cli(["matrix", "four", "--budget-usd", "9", "--json"], timeout=120)
    assert code == 1, dump(out, err)
    state = json.loads(out)
    a = state["cells"][0]
    assert a["status"] == "over-budget" and "stopped before the budget $9.00 was passed" in a["reason"], a
    assert "stops once its report is persisted" in err and "interrupting its launch" in err, dump(out, err)
    run_id = a["attempts"][0]["run_ids"][0]
    assert (plan.runs_dir / run_id / "stop-request").is_file(), "the stop path was not asked first"
    spent = records_spent(plan, state)
    assert spent <= 9.0 and cloud_spent(arm) <= 9.0, (spent, arm.app_log)
    assert round(state_spent(state), 2) == round(spent, 2) == round(report_spent(plan), 2)
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_revision_never_ready_is_retried_and_a_fatal_start_is_not(plan: Project, arm: FakeArm):  # noqa: F811
    write_plan(plan, presets=["mx-a", "mx-b"], trials=1,
               retry={"backoff_s": 1, "backoff_max_s": 2, "max_attempts": 4, "transient_attempts": 3})
    plan.env["LLMS_BENCHMARK_AZURE_READY_TIMEOUT_S"] = "4"
    plan.env["MATRIX_CELL_TRIAL_S"] = "0.3"
    arm.behaviour.boot_sequence = {"vot-mx-a": ["never", "ok"]}
    arm.behaviour.boot_by_app = {"vot-mx-b": "fatal"}
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 1, dump(out, err)
    by = cells(json.loads(out))
    a, b = by["mx-a"], by["mx-b"]
    assert a["status"] == "done" and len(a["attempts"]) == 2, a
    assert a["attempts"][0]["reason"].startswith("transient: ") and "/v1/models within" in a["attempts"][0]["reason"]
    assert "queued: a transient fault" in err
    assert b["status"] == "fault" and len(b["attempts"]) == 1, b  # not transient: failed at once
    assert [c["status"] for c in arm.calls("PUT", "containerApps/vot-mx-a")] == [201, 201]
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_display_plain_prints_a_status_line_every_n_seconds(plan: Project, arm: FakeArm):  # noqa: F811
    write_plan(plan, presets=["mx-a", "mx-b"], trials=1, parallel=1)
    plan.env["MATRIX_CELL_TRIAL_S"] = "3.0"
    started = datetime.now()
    code, out, err = plan.run_cli(["matrix", "four", "--display", "plain", "--status-every", "1",
                                   "--budget-usd", "100", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    lines = [" ".join(line.split()) for line in err.splitlines() if "matrix four " in line and " · GPU " in line]
    assert len(lines) >= 4, dump(out, err)
    line = re.compile(r"matrix four \d+m\d\ds: (\d) done, (\d) running, (\d) queued, (\d) waiting of 2 · "
                      r"GPU ([0-9.]+) h, \$([0-9.]+) of \$100\.00")
    parsed = [line.search(text) for text in lines]
    assert all(parsed), lines
    assert any(m.group(2) == "1" and float(m.group(6)) > 0 for m in parsed), lines  # a serve billing, live
    last = parsed[-1]
    assert last.group(1) == "2" and last.group(2) == "0"
    assert round(float(last.group(6)), 2) == round(records_spent(plan, json.loads(out)), 2)
    assert (datetime.now() - started).total_seconds() < 200
    code, _, err = plan.run_cli(["matrix", "four", "--display", "fancy"], timeout=60)
    assert code == 2 and "--display" in err and "auto, rich, plain" in err


# --- issue 61: money from the cloud's own clock --------------------------------------------------

@pytest.mark.timeout(300)
def test_a_create_retried_by_the_sdk_bills_from_the_apps_creation(plan: Project, arm: FakeArm):  # noqa: F811
    """Three 503s before the create takes: the SDK's retries (backoff ~3 s) bill nothing, the app's
    life as the cloud reports it bills, and the record says what the SDK retried."""
    write_plan(plan, presets=["mx-a"], trials=1)
    arm.behaviour.create_unavailable = {"vot-mx-a": 3}
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=180)
    assert code == 0, dump(out, err)
    state = json.loads(out)
    (run,) = runs_of(plan, "mx-a")
    assert run["create_retries"] == ["PUT 503"] * 3, run["create_retries"]
    spent, cloud = records_spent(plan, state), cloud_spent(arm)
    assert abs(spent - cloud) < 0.6, (spent, cloud)  # the app's life, not the request's: 3 s of retries unbilled
    serve_s = (datetime.fromisoformat(run["times"]["destroyed"]) -
               datetime.fromisoformat(run["times"]["serve_start"])).total_seconds()
    assert spent < serve_s - 1.5, (spent, serve_s)
    assert round(state_spent(state), 2) == round(spent, 2) == round(report_spent(plan), 2)
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_create_that_never_made_an_app_bills_nothing(plan: Project, arm: FakeArm):  # noqa: F811
    write_plan(plan, presets=["mx-a"], trials=1,
               retry={"backoff_s": 1, "backoff_max_s": 1, "max_attempts": 2, "transient_attempts": 1})
    arm.behaviour.create_unavailable = {"vot-mx-a": 1000}
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    state = json.loads(out)
    assert cloud_spent(arm) == 0 and arm.created == []
    assert records_spent(plan, state) == 0 and state_spent(state) == 0 and report_spent(plan) == 0, dump(out, err)
    for run in runs_of(plan, "mx-a"):
        assert run["gpu_hours"] == 0 and run["create_retries"] and set(run["create_retries"]) == {"PUT 503"}


def test_a_budget_that_is_not_finite_is_refused(plan: Project, arm: FakeArm):  # noqa: F811
    for value in ("inf", "nan", "-inf"):
        code, out, err = plan.run_cli(["matrix", "four", "--budget-usd", value], timeout=60)
        assert code == 2 and "budget_usd" in err and "Traceback" not in err, dump(out, err)
    write_plan(plan, budget_usd=float("inf"))
    code, out, err = plan.run_cli(["matrix", "four"], timeout=60)
    assert code == 2 and "budget_usd" in err and "Traceback" not in err, dump(out, err)
    assert arm.created == []


@pytest.mark.timeout(300)
def test_a_preset_another_launch_serves_queues_its_cell_until_it_is_free(plan: Project, arm: FakeArm):  # noqa: F811
    """Issue 61: serve-once refuses the cell's launch while another (a hand `serve`, another matrix)
    serves the preset: the cell is queued, never refused for good, and served once the unit is gone."""
    write_plan(plan, presets=["mx-a"], trials=1,
               retry={"backoff_s": 1, "backoff_max_s": 2, "max_attempts": 6})
    code, out, err = plan.run_cli(["serve", "azure-sweden", "mx-a"], timeout=90)
    assert code == 0, dump(out, err)
    proc = plan.popen(["matrix", "four", "--json"])
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                cell = state_of(plan)["cells"][0]
            except (OSError, ValueError, KeyError, IndexError):
                cell = {}
            if (cell.get("reason") or "").startswith("queued: another launch serves its preset"):
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"the cell was never queued for the preset held elsewhere: {cell}")
        code, dout, derr = plan.run_cli(["destroy", "azure-sweden", "mx-a"], timeout=90)
        assert code == 0, dump(dout, derr)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 0, dump(out, err)
    (cell,) = json.loads(out)["cells"]
    assert cell["status"] == "done", cell
    assert cell["attempts"][0]["reason"].startswith("held: "), cell["attempts"]
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_launch_killed_during_its_destroy_is_collected_never_served_again(plan: Project, arm: FakeArm):  # noqa: F811
    """Issue 61: SIGKILL lands in the destroy, both trials' missions done: the matrix sweeps the
    app, collects both trials from what they left before the destroy, and serves nothing again."""
    write_plan(plan, presets=["mx-a"], trials=2)
    plan.env["LLMS_BENCHMARK_FAILPOINT"] = "destroy:sigkill"
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, [(r["status"], r.get("reason")) for r in runs_of(plan, "mx-a")]
    (cell,) = json.loads(out)["cells"]
    assert cell["status"] == "done" and len(cell["attempts"]) == 1, cell
    assert [c["status"] for c in arm.calls("PUT", "containerApps/vot-mx-a")] == [201]  # served once
    runs = runs_of(plan, "mx-a")
    assert len(runs) == 2 and {r["status"] for r in runs} == {"ok"}, [(r["status"], r.get("reason")) for r in runs]
    state = json.loads(out)
    assert round(records_spent(plan, state), 2) == round(report_spent(plan), 2)
    assert abs(records_spent(plan, state) - cloud_spent(arm)) < 1.0
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(400)
def test_a_slow_create_is_counted_from_its_request_and_the_cell_stopped_before_the_budget(
        plan: Project, arm: FakeArm):  # noqa: F811
    """Issue 61: a cloud that takes 10 s to create the app. The budget sees the serve from the
    create request (its record's serve_start is on disk before the PUT), reserves the rest of the
    create while it runs (a create in progress refuses its delete: it is paid to its end), and
    stops the cell before the budget is passed; the records and the cloud's own log agree."""
    arm.behaviour.provision_s = 10.0
    write_plan(plan, presets=["mx-a"], trials=1,
               serve_costs={"cold_start_s": 12.0, "probe_s": 0.5, "smoke_s": 0.5, "destroy_s": 2.0})
    plan.env["MATRIX_CELL_TRIAL_S"] = "30.0"
    code, out, err = plan.run_cli(["matrix", "four", "--budget-usd", "20", "--json"], timeout=200)
    assert code == 1, dump(out, err)
    state = json.loads(out)
    a = state["cells"][0]
    assert a["status"] == "over-budget" and "stopped before the budget $20.00 was passed" in a["reason"], a
    run_id = a["attempts"][0]["run_ids"][0]
    rec = json.loads((plan.runs_dir / run_id / "run.json").read_text())
    lives = app_lives(arm, "vot-mx-a")
    assert len(lives) == 1 and lives[0] >= 10.0, arm.app_log  # the create's 10 s are billed, from the cloud
    assert rec["gpu_hours"] * 3600 >= lives[0] - 1.0, (rec["gpu_hours"], lives)
    spent = records_spent(plan, state)
    assert spent <= 20.0 and cloud_spent(arm) <= 20.0, (spent, arm.app_log)
    assert round(state_spent(state), 2) == round(spent, 2) == round(report_spent(plan), 2)
    assert_no_app_left(plan, arm)
