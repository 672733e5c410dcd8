"""What the agent left is read after the unit is destroyed: a launch on the replay stack
through the real opencode, with a witness at the start of the collect stage (tests/fakes/
collect_probe.py) that asks the unit's server for /v1/models and reads the units ledger. The
server must be gone, the ledger empty, the record's collect time after its destroy time, and
the run still ok with its figures (the collect lost nothing by waiting)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, Project, stop
from test_launch_e2e import SMALL_PROBE, assert_destroyed, dump

WITNESS = REPO / "tests" / "fakes" / "collect_probe.py"


@pytest.mark.slow  # the real opencode (pyproject's marker)
@pytest.mark.timeout(300)
def test_the_collect_starts_once_the_unit_is_destroyed(project: Project, tmp_path: Path):
    out_file = tmp_path / "witness.json"
    env = {**project.env, "COLLECT_PROBE_OUT": str(out_file)}
    proc = subprocess.Popen([sys.executable, str(WITNESS), "launch", "local", "replay", "replay-hello",
                             "--mission", "hello", *SMALL_PROBE], cwd=project.root, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        out, err = stop(proc)
        pytest.fail(f"the launch ran past 240 s{dump(out, err)}")
    _, rec = project.only_run()
    assert proc.returncode == 0 and rec["status"] == "ok", (rec.get("reason"), dump(out, err))
    seen = json.loads(out_file.read_text())
    # When the collect began: the server answered nothing, its process was gone, the ledger empty.
    assert seen["server"] in ("ConnectError", "ConnectTimeout", "ReadError", "RemoteProtocolError"), seen
    assert seen["pid_alive"] is False and seen["ledger"] == [] and seen["destroyed_at"] != "None", seen
    assert seen["report_copied"] is False, seen  # the agent's files too are read only from here on
    t = rec["times"]
    assert t["destroyed"] and t["collected"] and t["destroyed"] < t["collected"] <= t["end"], t
    # Nothing lost by waiting: the store's session, the wire's figures, the serving join.
    assert rec["session"]["turns"] >= 1 and rec["wire"]["turns"] == rec["session"]["turns"], rec["wire"]
    assert rec["serving"] is not None and rec["run"]["report_found"]
    assert_destroyed(project, rec)


def test_wait_does_not_take_a_trial_awaiting_its_collect_for_the_launch_s_end():
    """Between trials, trial one's record says its collect is pending (fault, the launch may yet
    die before it): `wait` keeps waiting; a trial stopped by a real fault ends the launch."""
    from datetime import UTC, datetime

    from harness.cli.wait import _ended
    from harness.launcher.after_destroy import mark_pending
    from harness.records.record import RowKey, RunRecord, Status, Timestamps, Trial

    now = datetime.now(UTC)
    rec = RunRecord(run_id="r", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="x"),
                    environment="e", stack="s", mission="hello", times=Timestamps(launch=now, end=now),
                    trial=Trial(group="r", index=1, of=3))
    mark_pending(rec)
    assert rec.status == Status.fault and not _ended([rec])
    rec.reason = "interrupted by SIGTERM"
    assert _ended([rec])
