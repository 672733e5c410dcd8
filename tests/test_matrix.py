"""The matrix's parts without launches: the plan and its refusals (file, field, fix; exit 2,
never a traceback), the budget's bound, what counts as a quota refusal, a resume's rules, the
state's lock, the report, and the GPU quota read from the loopback ARM with the real SDK."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from conftest import Project
from fakes.arm_server import FakeArm
from harness.errors import UserError
from harness.matrix.plan import MatrixPlan, check_plan, load_plan, validate_plan
from harness.matrix.report import matrix_report
from harness.matrix.resume import prepare
from harness.matrix.runner import QUOTA_REFUSAL, cell_bound_usd
from harness.matrix.state import Attempt, Cell, CellStatus, MatrixState, StateFolder
from harness.records.record import RowKey, RunRecord, Status, Timestamps, Trial, utcnow
from test_azure_stack import arm, in_process  # noqa: F401 - the fake ARM fixtures
from test_launch_e2e import dump


def write_plan(root: Path, name: str, text: str) -> None:
    folder = root / ".vot" / "matrices"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)


GOOD = "environment: replay\npresets: [replay-hello]\nmission: hello\n"
BAD_PLANS = [
    ("unknown-field", GOOD + "paralel: 3\n", "paralel", "remove it"),
    ("no-presets", "environment: replay\npresets: []\n", "presets", "at least one"),
    ("unknown-preset", "environment: replay\npresets: [replay-hello, nope]\n", "presets", "pick one of the available"),
    ("unknown-environment", "environment: nowhere\npresets: [replay-hello]\n", "environment", "pick one of the available"),
    ("path-as-preset", "environment: replay\npresets: [../x]\n", "presets", "use one of"),
    ("bad-effort", GOOD + "efforts: [extreme]\n", "efforts", "medium"),
    ("twice", "environment: replay\npresets: [replay-hello, replay-hello]\n", "presets", "list each once"),
    ("zero-trials", GOOD + "trials: 0\n", "trials", "1 to 20"),
    ("unknown-mission", "environment: replay\npresets: [replay-hello]\nmission: nope\n", "mission", "hello"),
    ("budget-without-price", GOOD + "budget_usd: 10\n", "gpu_hourly_usd", "set gpu_hourly_usd"),
    ("name-mismatch", GOOD + "name: other\n", "name", "set name:"),
    ("not-yaml", "environment: [replay\n", None, "fix the YAML syntax"),
    ("not-a-mapping", "- replay\n", None, "top-level keys"),
]


@pytest.mark.parametrize("case, text, field, fix", BAD_PLANS, ids=[c[0] for c in BAD_PLANS])
def test_a_bad_plan_names_the_file_the_field_and_the_fix(project: Project, case, text, field, fix):
    write_plan(project.root, case, text)
    with pytest.raises(UserError) as caught:
        plan = load_plan(project.root, case)
        check_plan(project.root, plan, project.root / ".vot" / "matrices" / f"{case}.yaml")
    exc = caught.value
    assert exc.field == field and fix in (exc.fix or ""), exc.render()
    assert exc.file and exc.file.endswith((f"{case}.yaml", "replay.yaml")), exc.render()


def test_the_cli_refuses_bad_input_with_exit_2_and_starts_nothing(project: Project):
    write_plan(project.root, "bad", GOOD + "paralel: 3\n")
    for args, phrase in ((["matrix", "bad"], "field 'paralel'"),
                         (["matrix", "../etc"], "is not a plan name"),
                         (["matrix", "missing"], "no matrix plan named 'missing'"),
                         (["matrix"], "no plan and no --environment"),
                         (["matrix", "-e", "replay", "-p", "replay-hello", "--mission", "hello", "--budget-usd", "5"],
                          "needs a GPU price"),
                         (["matrix", "-e", "replay", "-p", "replay-hello", "--budget-usd", "-1"], "budget_usd")):
        code, out, err = project.run_cli(args, timeout=60)
        assert code == 2 and phrase in " ".join(err.split()) and "Traceback" not in err, (args, dump(out, err))
        assert "fix:" in err, (args, dump(out, err))
    assert not (project.root / ".llms-benchmark" / "matrices" / "bad" / "state.json").exists()
    assert project.run_dirs() == [] and project.ledger() == {}


def test_flags_override_the_plan_and_knobs_do_not_change_its_identity(project: Project):
    write_plan(project.root, "p", GOOD + "efforts: [low, high]\ntrials: 3\n")
    plan = load_plan(project.root, "p")
    assert plan.name == "p" and plan.cells() == [("replay-hello", "low"), ("replay-hello", "high")]
    tuned = validate_plan({**plan.model_dump(), "parallel": 4, "budget_usd": 12.5})
    assert tuned.identity() == plan.identity()  # a resume may turn --parallel and --budget-usd
    assert validate_plan({**plan.model_dump(), "trials": 2}).identity() != plan.identity()


def test_a_cells_bound_is_its_mission_cap_times_trials_at_the_price():
    plan = MatrixPlan(name="x", environment="azure-sweden", presets=["a"], trials=3)
    assert cell_bound_usd(plan, 150, 3.673) == pytest.approx(2.5 * 3 * 3.673)
    assert cell_bound_usd(plan, 150, None) == 0.0


@pytest.mark.parametrize("reason, quota", [
    ("Azure refused to create vot-x: HTTP 409 (QuotaExceeded) Operation would exceed the quota "
     "'Managed Environment Consumption NCA100 GPUs'", True),
    ("creating vot-x failed: (ContainerAppProvisioningFailed) the GPU workload profile has no capacity", True),
    ("Azure refused to create vot-x: HTTP 409 (Conflict) The managed environment's workload profile 'gpu-a100' "
     "cannot take another replica", True),
    ("fatal line in the unit log: ERROR EngineCore failed to start.", False),
    ("vot-x did not list 'm' on /v1/models within 5s", False),
])
def test_what_counts_as_a_quota_refusal(reason, quota):
    assert bool(QUOTA_REFUSAL.search(reason)) is quota


def _state(*cells: Cell) -> MatrixState:
    return MatrixState(name="m", identity="i", environment="replay", mission="hello", trials=1, cells=list(cells))


def test_a_resume_runs_again_what_did_not_finish_and_keeps_what_did():
    plan = MatrixPlan(name="m", environment="replay", presets=["a", "b", "c", "d", "e"])
    dead = Attempt(index=1, started=utcnow(), pid=2 ** 22 + 12345)  # no such process
    state = _state(Cell(preset="a", effort="medium", status=CellStatus.done),
                   Cell(preset="b", effort="medium", status=CellStatus.running, attempts=[dead]),
                   Cell(preset="c", effort="medium", status=CellStatus.over_budget, reason="over"),
                   Cell(preset="d", effort="medium", status=CellStatus.queued, retry_at=utcnow() + timedelta(hours=1)))
    notes = prepare(state, plan)
    by = {c.preset: c for c in state.cells}
    assert by["a"].status == CellStatus.done
    assert by["b"].status == CellStatus.pending and by["b"].attempts[0].pid is None and notes
    assert by["c"].status == CellStatus.pending  # the budget may have been raised
    assert by["d"].status == CellStatus.pending and by["d"].retry_at is None
    assert by["e"].status == CellStatus.pending  # a cell the plan gained


def test_a_resume_refuses_while_an_earlier_launch_still_runs(tmp_path: Path):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "launch"])
    try:
        state = _state(Cell(preset="a", effort="medium", status=CellStatus.running,
                            attempts=[Attempt(index=1, started=utcnow(), pid=proc.pid)]))
        with pytest.raises(UserError, match=f"pid {proc.pid}"):
            prepare(state, MatrixPlan(name="m", environment="replay", presets=["a"]))
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_one_matrix_process_per_plan(tmp_path: Path):
    first = StateFolder(tmp_path, "m")
    first.lock()
    with pytest.raises(UserError, match="already running"):
        StateFolder(tmp_path, "m").lock()


def test_the_state_is_written_atomically_and_read_back(tmp_path: Path):
    folder = StateFolder(tmp_path, "m")
    state = _state(Cell(preset="a", effort="low"))
    folder.save(state)
    assert folder.load() == state
    assert [p.name for p in folder.dir.iterdir()] == ["state.json"]  # no temp file left
    folder.state.write_text("{torn")
    with pytest.raises(UserError, match="cannot be read"):
        folder.load()


def _record(root: Path, run_id: str, status: Status, mission_s: float, index: int, group: str,
            reason: str | None = None) -> None:
    t0 = utcnow()
    rec = RunRecord(run_id=run_id, key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="A100"),
                    environment="azure-sweden", stack="azure", mission="hello", status=status, reason=reason,
                    times=Timestamps(launch=t0, mission_start=t0, mission_end=t0 + timedelta(seconds=mission_s)),
                    trial=Trial(group=group, index=index, of=3), gpu_hours=0.5)
    rec.save(root / ".llms-benchmark" / "runs" / run_id)


def test_the_report_has_each_cells_row_spread_and_reason(tmp_path: Path):
    for i, (status, secs) in enumerate([(Status.ok, 60), (Status.ok, 180), (Status.void, 90)], start=1):
        _record(tmp_path, f"r{i}", status, secs, i, "r1", None if status == Status.ok else "no report | none")
    done = Cell(preset="p", effort="medium", status=CellStatus.done,
                attempts=[Attempt(index=1, started=utcnow(), run_ids=["r1", "r2", "r3"], gpu_hours=0.5, exit_code=1)])
    over = Cell(preset="q", effort="medium", status=CellStatus.over_budget, reason="not started: exceeds the budget")
    state = _state(done, over)
    state.trials, state.gpu_hourly_usd, state.budget_usd, state.parallel_why = 3, 4.0, 10.0, "--parallel 2"
    text = matrix_report(tmp_path, state)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == 2
    assert "2 of 3 with a row · mission 1m00s–3m00s (median 2m00s)" in rows[0]
    assert "| 0.5000 | 2.00 |" in rows[0] and "GPU spent: $2.00 at $4/GPU-h, budget $10.00" in text
    assert rows[1].endswith("| not started: exceeds the budget |") and "| over-budget | 0 | — |" in rows[1]


@pytest.mark.timeout(60)
def test_the_gpu_quota_is_read_from_arm_with_the_real_sdk(project: Project, in_process: FakeArm):  # noqa: F811
    from harness.matrix.quota import read_gpu_quota
    from harness.vot.environment import load_environment

    in_process.behaviour.gpu_quota, in_process.behaviour.gpu_used_elsewhere = 4, 1
    in_process.add_app("vot-someone-else")
    in_process.apps["vot-someone-else"].body["properties"]["workloadProfileName"] = "gpu-a100"
    quota = read_gpu_quota(load_environment(project.root, "azure-sweden"))
    assert (quota.limit, quota.used, quota.free) == (4, 2, 2)
    assert quota.describe().startswith("2 of 4 A100 GPUs free (Managed Environment Consumption NCA100 GPUs")
    assert in_process.calls("GET", "/managedEnvironments/vot-env/usages") and \
        in_process.calls("GET", "/locations/swedencentral/usages")
    assert not in_process.calls("PUT", "containerApps")


def test_a_typical_plan_validates():
    """Two presets × two efforts × 3 trials on Azure: four cells."""
    text = "environment: azure-sweden\npresets: [odd-qwen3-6-35b-a3b, odd-qwen3-8-27b]\nefforts: [medium, high]\n" \
           "mission: observability\ntrials: 3\nparallel: 4\nbudget_usd: 150\n"
    plan = validate_plan({"name": "odd", **yaml.safe_load(text)})
    assert len(plan.cells()) == 4


@pytest.mark.timeout(180)
def test_the_live_table_on_a_terminal_shows_cells_status_elapsed_and_gpu_cost(project: Project, monkeypatch):
    """In process, on a terminal console: two replay cells (the agent's stages stood in), the table
    redrawn while they run, the report and the state at the end."""
    import io

    from rich.console import Console

    from harness.matrix import run_matrix

    project.add_preset("replay-hello-b", trajectory="hello")
    env = yaml.safe_load((project.root / ".vot" / "environments" / "replay.yaml").read_text())
    project.add_environment("replay", yaml.safe_dump({**env, "gpu_hourly_usd": 3600.0,
                                                      "gpu_price_source": "test"}, sort_keys=False))
    for key, value in project.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LLMS_BENCHMARK_MATRIX_CELL", str(Path(__file__).parent / "fakes" / "matrix_cell.py"))
    monkeypatch.setenv("MATRIX_CELL_TRIAL_S", "2.0")
    monkeypatch.setattr("harness.matrix.LIVE_REFRESH_S", 0.2)
    import harness.results.render as results_render

    rendered = []
    real_render = results_render.render_page
    monkeypatch.setattr(results_render, "render_page", lambda *a, **k: rendered.append(a) or real_render(*a, **k))
    page = project.root / ".llms-benchmark" / "README.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("# results\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    plan = MatrixPlan(name="live", environment="replay", presets=["replay-hello", "replay-hello-b"],
                      mission="hello", parallel=2, no_sandbox=True)
    screen = io.StringIO()
    said: list[str] = []
    code, state, report = run_matrix(project.root, plan, None, fresh=False, say=said.append,
                                     console=Console(file=screen, force_terminal=True, width=200))
    text = screen.getvalue()
    assert code == 0, (said, text[-3000:])
    assert "matrix live: replay, mission hello" in text and "running" in text and "done" in text
    assert "GPU $" in text and "at most 2 (--parallel 2)" in text
    assert all(c.status == CellStatus.done for c in state.cells)  # a replay unit bills no GPU: $0.00
    assert report.is_file() and "| `replay-hello` medium | done | 1 |" in report.read_text()
    assert len(rendered) == 1 and "### Local serving" in page.read_text()  # the results page, once
    assert project.ledger() == {}


# -- the money (issue 51): a cell's bound is its whole serve; transient faults; a leftover's cost ------------
def _serve(root: Path, preset: str, run_id: str, *, cold: float, probe: float, smoke: float, missions: list[float],
           tail: float, gpus: int = 1) -> None:
    """One earlier serve of `preset` with its trials, stamped as a launch stamps them."""
    t0 = utcnow() - timedelta(hours=1)
    ready, probed = t0 + timedelta(seconds=cold), t0 + timedelta(seconds=cold + probe)
    smoked = probed + timedelta(seconds=smoke)
    at, recs = smoked, []
    for index, secs in enumerate(missions, start=1):
        rid = run_id if index == 1 else f"{run_id}-t{index}"
        times = Timestamps(launch=t0, serve_start=t0, ready=ready, probed=probed, smoked=smoked, mission_start=at,
                           mission_end=at + timedelta(seconds=secs))
        at = at + timedelta(seconds=secs)
        recs.append((rid, times, index))
    destroyed = at + timedelta(seconds=tail)
    hours = (destroyed - t0).total_seconds() / 3600 * gpus
    for rid, times, index in recs:
        times.destroyed = times.end = destroyed
        RunRecord(run_id=rid, key=RowKey(preset=preset, effort="medium", effort_requested="medium", gpu="A100"),
                  environment="azure-sweden", stack="azure", mission="hello", status=Status.ok, times=times,
                  trial=Trial(group=run_id, index=index, of=len(missions)), gpu_hours=hours, gpus=gpus,
                  ).save(root / ".llms-benchmark" / "runs" / rid)


def test_a_cells_bound_is_its_whole_serve_from_the_presets_earlier_records(tmp_path: Path):
    from harness.matrix.bound import estimate
    from harness.matrix.plan import ServeCosts

    defaults = ServeCosts()
    none = estimate(tmp_path, "azure-sweden", "p", 2, 30, defaults)
    assert none.seconds == 900 + 300 + 300 + 300 + 2 * 1800 and "defaults" in none.source
    _serve(tmp_path, "p", "20260101T000000Z-p-medium-aaaa", cold=600, probe=60, smoke=90, missions=[1000, 1200],
           tail=120)
    _serve(tmp_path, "p", "20260102T000000Z-p-medium-bbbb", cold=400, probe=80, smoke=30, missions=[2000], tail=200)
    _serve(tmp_path, "q", "20260103T000000Z-q-medium-cccc", cold=9000, probe=1, smoke=1, missions=[1], tail=1)
    b = estimate(tmp_path, "azure-sweden", "p", 3, 30, defaults)
    # The longest of each part over the preset's own serves; a mission: the longer of the cap and the longest seen.
    assert (b.cold_start_s, b.probe_s, b.smoke_s, b.destroy_s, b.trial_s, b.trials) == \
        pytest.approx((600, 80, 90, 200, 2000, 3))
    assert b.usd(3600.0) == pytest.approx(600 + 80 + 90 + 200 + 3 * 2000)
    assert "2 earlier serve(s)" in b.source and "$6970.00" in b.describe(3600.0)
    other_env = estimate(tmp_path, "elsewhere", "p", 1, 30, defaults)
    assert "defaults" in other_env.source  # another environment's serves say nothing of this one


@pytest.mark.parametrize("reason, transient", [
    ("Azure refused to create vot-x: HTTP 503 (ServiceUnavailable) The service is unavailable", True),
    ("creating vot-x failed: HTTP 500 (InternalServerError) boom", True),
    ("Azure refused to create vot-x: HTTP 429 (TooManyRequests) Too many requests; retry later.", True),
    ("vot-x did not list 'm' on /v1/models within 1800s", True),
    ("creating vot-x did not finish in time (Azure still reports it in progress)", True),
    ("probe failed: ConnectionResetError: [Errno 104] Connection reset by peer", True),
    ("the unit went away: RemoteProtocolError: Server disconnected without sending a response", True),
    ("fatal line in the unit log: ERROR EngineCore failed to start.", False),
    ("restarted 2 times (CrashLoopBackOff): CUDA error: no kernel image is available", False),
    ("smoke failed: the model never called a tool", False),
    ("HTTP 404 (ResourceNotFound) the image does not exist", False),
])
def test_what_counts_as_a_transient_fault(reason, transient):
    from harness.matrix.runner import TRANSIENT_FAULT

    assert bool(TRANSIENT_FAULT.search(reason)) is transient


def test_a_leftovers_cost_is_its_life_as_the_cloud_reports_it():
    from harness.run.units import leftover_gpu_hours
    from harness.stacks.base import Unit

    destroyed = utcnow()
    created = destroyed - timedelta(seconds=3600)
    rec = RunRecord(run_id="r", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="A100"),
                    environment="azure-sweden", stack="azure", mission="hello",
                    times=Timestamps(launch=created, serve_start=destroyed - timedelta(seconds=1800)), gpus=None)
    unit = Unit(name="vot-p", stack="azure", environment="azure-sweden", preset="p", base_url="", served_name="p",
                max_model_len=None, extra={"created_at": created.isoformat()})
    assert leftover_gpu_hours(unit, rec, destroyed) == pytest.approx(1.0)  # from createdAt, one A100
    unit.extra["created_at"] = None
    assert leftover_gpu_hours(unit, rec, destroyed) == pytest.approx(0.5)  # no cloud stamp: from the serve's start
    rec.gpus = 2
    assert leftover_gpu_hours(unit, rec, destroyed) == pytest.approx(1.0)


def test_a_resume_keeps_the_finished_trials_of_a_launch_that_died(tmp_path: Path):
    """A launch that died with the matrix: its finished trial is kept and its serve counted; the
    cell runs again for the missing trial only; a cell with every trial kept is done."""
    first = "20260101T000000Z-p-medium-aaaa"
    _serve(tmp_path, "p", first, cold=10, probe=1, smoke=1, missions=[5, 5], tail=2)
    second = tmp_path / ".llms-benchmark" / "runs" / f"{first}-t2" / "run.json"
    rec = RunRecord.load(second)
    rec.status, rec.reason = Status.fault, "the launch process died without finishing"
    rec.save(second.parent)
    plan = MatrixPlan(name="m", environment="azure-sweden", presets=["p"], trials=2)
    dead = Attempt(index=1, started=utcnow(), pid=2 ** 22 + 12345, run_ids=[first])
    state = _state(Cell(preset="p", effort="medium", status=CellStatus.running, attempts=[dead]))
    state.trials, state.gpu_hourly_usd = 2, 3600.0
    notes = prepare(state, plan, tmp_path)
    cell = state.cells[0]
    assert cell.status == CellStatus.pending and cell.trials_finished == 1 and "1 of 2 trial(s) finished" in notes[0]
    assert dead.run_ids == [first, f"{first}-t2"] and dead.finished == [first]
    assert state.spent_usd() == pytest.approx((10 + 1 + 1 + 10 + 2) * 1.0, abs=0.01)
    rec.status = Status.ok
    rec.save(second.parent)
    cell.status = CellStatus.interrupted
    prepare(state, plan, tmp_path)
    assert cell.status == CellStatus.done and cell.trials_finished == 2
