"""Stop after the report: a run ended once its report is persisted still counts (ok, `ended_by`
says so, the report as it stood then is the run's); a stop asked for before any report changes
nothing (the run ends as it would have: here void). The guard on its own first, then the real
launch on the replay stack and the real opencode, both ways."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import Project, stop
from harness.stages.report_stop import BY_MAINTAINER, ReportStop

SMALL_PROBE = ["--probe-long-tokens", "2000"]
STEP = {"type": "step_finish"}


# -- the guard ---------------------------------------------------------------------------
def _guard(tmp_path: Path, after: int | None = None) -> tuple[ReportStop, Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = tmp_path / "stop-request"
    return ReportStop(workspace, "REPORT.md", request, after), workspace / "REPORT.md", request


def test_no_report_never_stops(tmp_path: Path):
    guard, _, request = _guard(tmp_path, after=2)
    request.write_text("stop")
    for _ in range(10):
        guard.on_event(STEP)
        assert guard() is None
    assert guard.ignored_request and guard.snapshot is None


def test_stops_n_turns_after_the_report_last_changed(tmp_path: Path):
    guard, report, _ = _guard(tmp_path, after=3)
    guard.on_event(STEP)
    report.write_text("draft")
    guard.on_event(STEP)  # turn 2: the report is seen
    guard.on_event(STEP)
    assert guard() is None
    report.write_text("final")  # a change restarts the count
    guard.on_event(STEP)  # turn 4
    guard.on_event(STEP)
    guard.on_event(STEP)
    assert guard() is None  # two turns since the change
    guard.on_event(STEP)
    assert guard() == "stopped after its report: 3 model turns without changing it"
    assert guard.snapshot == b"final"
    report.write_text("rewritten after the stop")  # what the agent does meanwhile is not the run's
    assert guard() == "stopped after its report: 3 model turns without changing it"
    assert guard.snapshot == b"final"


def test_a_change_between_turns_restarts_the_count(tmp_path: Path):
    guard, report, _ = _guard(tmp_path, after=1)
    report.write_text("v1")
    guard.on_event(STEP)  # turn 1 sees v1
    guard.on_event(STEP)  # turn 2: one turn without a change...
    report.write_text("v2")  # ...but it changed since, before the guard polls
    guard.on_event({"type": "text"})
    assert guard() is None  # re-read at the decision: the count starts again
    guard.on_event(STEP)
    assert guard() is not None and guard.snapshot == b"v2"


def test_the_maintainer_stops_at_once_once_a_report_exists(tmp_path: Path):
    guard, report, request = _guard(tmp_path)  # no automatic stop
    report.write_text("the report")
    for _ in range(5):
        guard.on_event(STEP)
    assert guard() is None
    request.write_text("stop")
    assert guard() == f"stopped after its report: {BY_MAINTAINER}"
    assert guard.snapshot == b"the report"


@pytest.mark.parametrize("how", ["link", "folder", "oversized"])
def test_a_report_that_is_no_report_never_stops_the_run(tmp_path: Path, how: str):
    """The agent cannot make a run count by pointing REPORT.md elsewhere (the answer key, say)."""
    guard, report, request = _guard(tmp_path, after=1)
    target = tmp_path / "key.yaml"
    target.write_text("the answer key")
    if how == "link":
        report.symlink_to(target)
    elif how == "folder":
        report.mkdir()
    else:
        report.write_bytes(b"x" * (1024 * 1024 + 1))
    request.write_text("stop")
    for _ in range(4):
        guard.on_event(STEP)
        assert guard() is None
    assert guard.snapshot is None


# -- the launch --------------------------------------------------------------------------
def _setup(project: Project) -> None:
    project.add_trajectory("report-then-reading")
    project.add_preset("replay-reading", trajectory="report-then-reading")
    project.add_mission("reading", stall_minutes=0.5, time_cap_minutes=4)


def _record(project: Project) -> dict | None:
    dirs = project.run_dirs()
    return json.loads((dirs[0] / "run.json").read_text()) if dirs else None


def _wait(what: str, check, timeout_s: float, proc) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            pytest.fail(f"the launch ended before {what}: {proc.communicate()}")
        time.sleep(0.3)
    pytest.fail(f"no {what} after {timeout_s:.0f}s")


def _assert_stopped_ok(project: Project, rec: dict, how: str) -> None:
    run_dir = project.run_dirs()[0]
    assert rec["status"] == "ok" and rec["reason"] is None, rec["reason"]
    assert rec["run"]["stopped_after_report"] == how
    assert rec["run"]["ended_by"] == f"stopped after its report: {how}"
    report = (run_dir / "report.md").read_bytes()
    assert report == b"greet.py: hello from the workspace\nnumbers.py: 55\n"
    assert rec["run"]["report_sha256"] == hashlib.sha256(report).hexdigest()
    # The run ended before the stall the trajectory ends on: never the watchdog's 30 s.
    assert not any(s["kind"] == "stall" and s["usage"] for s in Project.served(run_dir, "hello"))
    assert rec["times"]["destroyed"]


@pytest.mark.timeout(300)
def test_launch_stops_itself_n_turns_after_the_report(project: Project):
    _setup(project)
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-reading", "--mission", "reading",
                                      "--stop-after-report", "2", *SMALL_PROBE], timeout=240)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    _assert_stopped_ok(project, _record(project), "2 model turns without changing it")


def _report_and_session(project: Project) -> bool:
    dirs = project.run_dirs()
    if not dirs or not (dirs[0] / "workspace" / "REPORT.md").is_file():
        return False
    try:
        return '"sessionID"' in (dirs[0] / "opencode-events.jsonl").read_text(errors="replace")
    except FileNotFoundError:
        return False


@pytest.mark.timeout(300)
def test_the_maintainer_stops_a_run_after_its_report(project: Project):
    _setup(project)
    proc = project.popen(["launch", "local", "replay", "replay-reading", "--mission", "reading", *SMALL_PROBE])
    try:
        # The report on disk, and the session it belongs to named on opencode's event stream: a stop
        # that lands between the write and opencode's first event line leaves no session the harness
        # can call its own (the run is void then, rightly), and which comes first is the box's timing.
        _wait("a persisted report", lambda: _report_and_session(project), 200, proc)
        run_id = project.run_dirs()[0].name
        code, out, err = project.run_cli(["stop", run_id[:20]], timeout=30)
        assert code == 0, err
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 0, err[-3000:]
    _assert_stopped_ok(project, _record(project), BY_MAINTAINER)


@pytest.mark.timeout(300)
def test_a_stop_before_any_report_leaves_the_run_void(project: Project):
    project.add_trajectory("stall")
    project.add_preset("replay-stall", trajectory="stall")
    project.add_mission("stall", stall_minutes=0.25, time_cap_minutes=3)
    proc = project.popen(["launch", "local", "replay", "replay-stall", "--mission", "stall", *SMALL_PROBE])
    try:
        _wait("the mission's start", lambda: ((_record(project) or {}).get("times") or {}).get("mission_start"),
              200, proc)
        code, _, err = project.run_cli(["stop", project.run_dirs()[0].name], timeout=30)
        assert code == 0, err
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode == 1, err[-3000:]
    rec = _record(project)
    assert rec["status"] == "void" and rec["run"]["stopped_after_report"] is None
    assert rec["run"]["ended_by"].startswith("watchdog: no new opencode event")
    assert "no report was ever persisted" in err


def test_stop_refuses_what_is_not_a_running_launch(project: Project):
    code, _, err = project.run_cli(["stop", "nothing-like-it"], timeout=30)
    assert code == 2 and "no single run matches 'nothing-like-it'" in err and "Traceback" not in err
    folder = project.runs_dir / "20260101T000000Z-x-medium-abcd"
    folder.mkdir(parents=True)
    code, _, err = project.run_cli(["stop", folder.name], timeout=30)
    assert code == 2 and "is not running" in err
    assert not (folder / "stop-request").exists()
    assert os.listdir(folder) == []
