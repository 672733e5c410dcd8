"""`llms-benchmark matrix` on the azure stack: the real console script, the real Azure SDK
against the loopback ARM server (tests/fakes/arm_server.py), each cell a real `launch local`
process (its serve, trials, destroy, ledger, records and signals) with the agent's stages
stood in (tests/fakes/matrix_cell.py: no opencode here; tests/test_matrix_e2e.py runs it).

A 4-preset × 2-trial plan with --parallel 3: never more than 3 apps at once (from the server's
own log of app lives), a quota refusal queued then served, one cell faulting while the rest
finish, a budget that stops the last cell before it serves, and Ctrl-C mid-matrix leaving no
app, then a resume that finishes the rest.
"""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest
import yaml

from conftest import REPO, Project, stop
from fakes.arm_server import FakeArm
from test_azure_stack import PRESET, arm  # noqa: F401 - the fake ARM fixture
from test_launch_e2e import dump

ENV = "azure-sweden"
PRESETS = ["mx-a", "mx-b", "mx-c", "mx-d"]
CELL = REPO / "tests" / "fakes" / "matrix_cell.py"
SERVE_COSTS = {"cold_start_s": 3.0, "probe_s": 0.5, "smoke_s": 0.5, "destroy_s": 2.0}


@pytest.fixture
def plan(project: Project, arm: FakeArm) -> Project:  # noqa: F811
    """Four azure presets (copies of PRESET), a mission `quick` (cap 0.01 min: a cell's bound
    is $1.20 at the test price of $3600/GPU-h), and the plan `four` (2 trials, --parallel 3)."""
    base = yaml.safe_load((REPO / ".vot" / "presets" / f"{PRESET}.yaml").read_text())
    for name in PRESETS:
        project.add_preset(name, yaml.safe_dump({**base, "name": name, "served_model_name": name}, sort_keys=False))
    env = yaml.safe_load((REPO / ".vot" / "environments" / f"{ENV}.yaml").read_text())
    env["gpu_hourly_usd"] = 3600.0  # $1 a GPU-second: a few seconds of serve read as dollars
    project.add_environment(ENV, yaml.safe_dump(env, sort_keys=False))
    project.add_mission("quick", time_cap_minutes=0.01)
    write_plan(project)
    project.env["LLMS_BENCHMARK_MATRIX_CELL"] = str(CELL)
    project.env["MATRIX_CELL_TRIAL_S"] = "1.0"
    return project


def write_plan(project: Project, **changes) -> None:
    data = {"environment": ENV, "presets": PRESETS, "efforts": ["medium"], "mission": "quick", "trials": 2,
            "parallel": 3, "no_sandbox": True, "retry": {"backoff_s": 1, "backoff_max_s": 2, "max_attempts": 4},
            # a serve's parts before a preset has records: the fake's are about a second each
            "serve_costs": SERVE_COSTS, **changes}
    folder = project.root / ".vot" / "matrices"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "four.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def state_of(project: Project) -> dict:
    return json.loads((project.root / ".llms-benchmark" / "matrices" / "four" / "state.json").read_text())


def cells(state: dict) -> dict[str, dict]:
    return {c["preset"]: c for c in state["cells"]}


def assert_no_app_left(project: Project, arm: FakeArm) -> None:  # noqa: F811
    assert not arm.apps, f"apps left in the fake ARM: {list(arm.apps)}"
    assert project.ledger() == {}, f"the ledger still holds {project.ledger()}"


def assert_trials_kept(project: Project, cell: dict, trials: int = 2) -> list[dict]:
    """Over all the cell's launches: each trial finished once (ok), none served again."""
    records = [json.loads((project.runs_dir / r / "run.json").read_text())
               for a in cell["attempts"] for r in a["run_ids"] if (project.runs_dir / r / "run.json").is_file()]
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) == trials, [(r["run_id"], r["status"], r["reason"]) for r in records]
    assert sorted(r for a in cell["attempts"] for r in a["finished"]) == sorted(r["run_id"] for r in ok)
    return ok


def assert_records_of(project: Project, cell: dict, trials: int = 2) -> list[dict]:
    run_ids = cell["attempts"][-1]["run_ids"]
    assert len(run_ids) == trials, cell
    records = [json.loads((project.runs_dir / r / "run.json").read_text()) for r in run_ids]
    assert all(r["status"] == "ok" and r["stack"] == "azure" and r["unit"] == f"vot-{cell['preset']}"
               for r in records), [r["reason"] for r in records]
    assert [r["trial"]["index"] for r in records] == list(range(1, trials + 1))
    assert {r["trial"]["group"] for r in records} == {run_ids[0]}
    return records


@pytest.mark.timeout(300)
def test_four_presets_two_trials_never_more_than_three_apps(plan: Project, arm: FakeArm):  # noqa: F811
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    state = json.loads(out)
    assert state == state_of(plan)
    assert state["parallel"] == 3 and "100 of 100 A100 GPUs free" in state["parallel_why"], state["parallel_why"]
    for cell in state["cells"]:
        assert cell["status"] == "done" and len(cell["attempts"]) == 1, cell
        assert_records_of(plan, cell)
    # From the server's own log of app lives: each app once, never more than three alive at once.
    assert sorted(arm.created) == [f"vot-{p}" for p in PRESETS] and sorted(arm.deleted) == sorted(arm.created)
    assert 2 <= arm.peak_apps() <= 3, arm.app_log
    assert arm.calls("GET", "/usages"), "the GPU quota was never read"
    assert_no_app_left(plan, arm)
    report = (plan.root / ".llms-benchmark" / "matrices" / "four" / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| `mx-")]
    assert len(rows) == 4 and all("| done |" in r and "2 of 2 with a row" in r for r in rows), report
    assert "at most 3 cells at once" in report


@pytest.mark.timeout(300)
def test_the_quota_caps_parallelism_and_a_quota_refusal_is_queued_then_served(plan: Project, arm: FakeArm):  # noqa: F811
    arm.behaviour.gpu_quota, arm.behaviour.gpu_used_elsewhere = 3, 1  # two GPUs free: the cap, not --parallel 3
    arm.behaviour.quota_refusals = {"vot-mx-b": 1}
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    state = json.loads(out)
    assert state["parallel"] == 2 and "2 of 3 A100 GPUs free" in state["parallel_why"], state["parallel_why"]
    b = cells(state)["mx-b"]
    assert b["status"] == "done" and len(b["attempts"]) == 2, b
    first = b["attempts"][0]
    assert first["exit_code"] == 3 and first["reason"].startswith("quota:") and "QuotaExceeded" in first["reason"]
    refused = plan.root / ".llms-benchmark" / "refused"
    assert first["run_ids"] and all((refused / r / "run.json").is_file() and not (plan.runs_dir / r).exists()
                                    for r in first["run_ids"]), "a quota refusal's run folder stays out of git"
    assert_records_of(plan, b)
    assert "queued: Azure refused it for quota or capacity" in err, dump(out, err)
    puts = [c["status"] for c in arm.calls("PUT", "containerApps/vot-mx-b")]
    assert puts == [409, 201], puts
    assert all(c["status"] == "done" for c in state["cells"])
    assert arm.peak_apps() <= 2, arm.app_log
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(300)
def test_a_faulting_cell_never_stops_the_others(plan: Project, arm: FakeArm):  # noqa: F811
    arm.behaviour.boot_by_app = {"vot-mx-c": "fatal"}
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 1, dump(out, err)
    by = cells(json.loads(out))
    assert by["mx-c"]["status"] == "fault" and "Engine core initialization failed" in by["mx-c"]["reason"], by["mx-c"]
    assert by["mx-c"]["attempts"][0]["exit_code"] == 3 and len(by["mx-c"]["attempts"]) == 1
    for name in ("mx-a", "mx-b", "mx-d"):
        assert by[name]["status"] == "done", by[name]
        assert_records_of(plan, by[name])
    assert "vot-mx-c" in arm.deleted
    assert_no_app_left(plan, arm)
    report = (plan.root / ".llms-benchmark" / "matrices" / "four" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| `mx-c`"))
    assert "| fault |" in row and "Engine core initialization failed" in row


@pytest.mark.timeout(300)
def test_a_budget_stops_the_last_cell_before_it_serves(plan: Project, arm: FakeArm):  # noqa: F811
    """A cell's bound is its whole serve (cold start, probe, smoke, trials, destroy): the first
    from the plan's serve_costs ($3 + $0.5 + $0.5 + 2 × $0.60 + $2 = $7.20), the later ones from
    the records of the serves before them. $12 holds one serve and a second one's bound at most:
    the rest are not started, and what was spent, by the records and by the server's own log of
    app lives, stays within the budget."""
    plan.env["MATRIX_CELL_TRIAL_S"] = "1.0"
    code, out, err = plan.run_cli(["matrix", "four", "--budget-usd", "12", "--json"], timeout=240)
    assert code == 1, dump(out, err)
    state = json.loads(out)
    statuses = [c["status"] for c in state["cells"]]
    assert statuses[0] == "done" and "over-budget" in statuses and set(statuses) <= {"done", "over-budget"}, state
    never = [c for c in state["cells"] if c["status"] == "over-budget" and not c["attempts"]]
    assert never, state
    for cell in state["cells"]:
        if cell["status"] == "over-budget" and not cell["attempts"]:
            assert "exceeds the budget $12.00" in cell["reason"], cell
            assert f"vot-{cell['preset']}" not in arm.created, "an over-budget cell was served"
        elif cell["status"] == "over-budget":  # its stand-in missions outran their cap: stopped in time
            assert "stopped before the budget $12.00 was passed" in cell["reason"], cell
    assert "cold start 3s + probe 0s + smoke 0s + 2 trial(s)" in err or "earlier serve" in err, dump(out, err)
    spent = records_spent(plan, state)
    assert spent <= 12.0, spent
    assert round(sum(a["gpu_hours"] for c in state["cells"] for a in c["attempts"]) * 3600, 2) == round(spent, 2)
    assert cloud_spent(arm) <= 12.0, arm.app_log
    assert_no_app_left(plan, arm)


def records_spent(project: Project, state: dict) -> float:
    """$ billed by the records (one serve per launch: its trials share the GPU-hours), at $1 a second."""
    total = 0.0
    for cell in state["cells"]:
        for attempt in cell["attempts"]:
            hours = [json.loads(p.read_text())["gpu_hours"] or 0.0 for r in attempt["run_ids"]
                     for p in (project.runs_dir / r / "run.json", project.root / ".llms-benchmark" / "refused" / r /
                               "run.json") if p.is_file()]
            total += max(hours, default=0.0) * 3600
    return total


def cloud_spent(arm: FakeArm) -> float:
    """$ the apps lived by the server's own log (created -> deleted), at $1 a second."""
    born: dict[str, float] = {}
    total = 0.0
    for t, what, name in sorted(arm.app_log):
        if what == "created":
            born[name] = t
        else:
            total += t - born.pop(name)
    return total


@pytest.mark.timeout(400)
def test_ctrl_c_leaves_no_app_and_a_resume_finishes_the_rest(plan: Project, arm: FakeArm):  # noqa: F811
    plan.env["MATRIX_CELL_TRIAL_S"] = "3.0"
    proc = plan.popen(["matrix", "four"])
    try:
        arm.wait_for(lambda: sum(1 for a in list(arm.apps.values()) if a.ready) >= 2, timeout_s=120)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 128 + signal.SIGINT, dump(out, err)
    assert_no_app_left(plan, arm)
    state = state_of(plan)
    assert state["interrupted"] == "SIGINT"
    statuses = [c["status"] for c in state["cells"]]
    assert statuses.count("interrupted") >= 2 and "running" not in statuses, statuses
    assert set(statuses) <= {"interrupted", "pending", "done"}, statuses
    assert "forwarded to its launch" in err, dump(out, err)
    before = {c["preset"]: len(c["attempts"]) for c in state["cells"]}

    plan.env["MATRIX_CELL_TRIAL_S"] = "0.3"  # the resume: quick trials
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    assert "resuming matrix four" in err
    state = json.loads(out)
    for cell in state["cells"]:
        assert cell["status"] == "done", cell
        assert_trials_kept(plan, cell)
        assert len(cell["attempts"]) == before[cell["preset"]] + (0 if before[cell["preset"]] and
                                                                  cell["attempts"][0]["exit_code"] == 0 else 1)
    assert state["runs"] == 2 and state["interrupted"] is None
    # Every serve counted, the interrupted ones too: the state and the report agree with the records.
    spent = records_spent(plan, state)
    report = (plan.root / ".llms-benchmark" / "matrices" / "four" / "report.md").read_text()
    assert round(sum(a["gpu_hours"] for c in state["cells"] for a in c["attempts"]) * 3600, 2) == round(spent, 2)
    assert f"GPU spent: ${spent:.2f}" in report, report
    assert arm.peak_apps() <= 3
    assert_no_app_left(plan, arm)


def test_a_changed_plan_is_refused_until_fresh(plan: Project, arm: FakeArm):  # noqa: F811
    state_dir = plan.root / ".llms-benchmark" / "matrices" / "four"
    state_dir.mkdir(parents=True)
    (state_dir / "state.json").write_text(json.dumps({
        "name": "four", "identity": "0" * 16, "environment": ENV, "mission": "quick", "trials": 1, "cells": []}))
    code, out, err = plan.run_cli(["matrix", "four"], timeout=60)
    flat = " ".join(err.split())
    assert code == 2 and "the plan four changed" in flat and "--fresh" in flat and "Traceback" not in err, \
        dump(out, err)
    assert not arm.created
    shutil.rmtree(state_dir)


@pytest.mark.timeout(300)
def test_two_efforts_of_one_preset_never_serve_at_once(plan: Project, arm: FakeArm):  # noqa: F811
    """One unit name per preset (`vot-<preset>`): its cells run one after the other, whatever --parallel."""
    write_plan(plan, presets=["mx-a"], efforts=["low", "high"], trials=1)
    plan.env["MATRIX_CELL_TRIAL_S"] = "0.2"
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    assert [c["status"] for c in json.loads(out)["cells"]] == ["done", "done"]
    assert arm.created == ["vot-mx-a", "vot-mx-a"] and arm.peak_apps() == 1, arm.app_log
    assert "already served" not in err
    assert_no_app_left(plan, arm)


@pytest.mark.timeout(400)
def test_a_killed_matrix_takes_its_launches_down_and_a_resume_finishes(plan: Project, arm: FakeArm):  # noqa: F811
    """SIGKILL leaves the matrix no chance to forward anything: its launches get SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and destroy their apps; the next run finds the cells it left `running`."""
    plan.env["MATRIX_CELL_TRIAL_S"] = "3.0"
    proc = plan.popen(["matrix", "four"])
    try:
        arm.wait_for(lambda: sum(1 for a in list(arm.apps.values()) if a.ready) >= 2, timeout_s=120)
        proc.kill()
        proc.communicate(timeout=30)
        arm.wait_for(lambda: not arm.apps, timeout_s=90)
    finally:
        if proc.poll() is None:
            stop(proc)
    arm.wait_for(lambda: plan.ledger() == {}, timeout_s=30)
    assert "running" in [c["status"] for c in state_of(plan)["cells"]]
    plan.env["MATRIX_CELL_TRIAL_S"] = "0.3"  # the resume: quick trials
    code, out, err = plan.run_cli(["matrix", "four", "--json"], timeout=240)
    assert code == 0, dump(out, err)
    assert "its launch ended with the matrix that started it" in err
    assert all(c["status"] == "done" for c in json.loads(out)["cells"])
    for cell in json.loads(out)["cells"]:
        assert_trials_kept(plan, cell)
    assert_no_app_left(plan, arm)
