"""Issue 63, item 4: every path of the slash command ends honestly. `wait` prints what the
command asks the agent to report (status, reason, the probe's speeds, turns, tokens, where the
report is) and what the run ends in — a row once ruled, a non-conclusive entry, a check that makes
no row, or "scripted trajectory: no row"; while a run goes on, whether its mission's report is
persisted yet (what `stop` needs). The real console script, on records written here."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import psutil
import pytest

from conftest import Project
from harness.records.record import (Probe, RowKey, RunOutcome, RunRecord, SessionFigures, Status, Timestamps,
                                    Tokens)

RUN = "20261205T100000Z-cpu-qwen2-5-coder-1-5b-medium-ab12"


def _record(project: Project, *, status: Status = Status.ok, mission: str = "hello", environment: str = "cpu",
            scripted: bool = False, ended: bool = True, folder: str = "runs") -> RunRecord:
    launch = datetime(2026, 12, 5, 10, tzinfo=UTC)
    record = RunRecord(
        run_id=RUN, key=RowKey(preset="cpu-qwen2-5-coder-1-5b", effort="medium", effort_requested="medium", gpu="CPU"),
        environment=environment, stack="replay" if scripted else "local-llamacpp", mission=mission, status=status,
        scripted=scripted, reason=None if status == Status.ok else f"the mission ran past its cap in {project.root}",
        stopped_at=None if status == Status.ok else "run",
        times=Timestamps(launch=launch, end=launch + timedelta(minutes=11) if ended else None),
        probe=Probe(decode_short_tps=52.25, decode_long_tps=40.5, prefill_tps=3120.0),
        session=SessionFigures(root_session="ses_1", sessions=1, tokens=Tokens(input=123456, output=7890), turns=14,
                               median_turn_s=1.5, compactions=0, opencode_version="1.0"),
        run=RunOutcome(report_found=ended))
    dest = project.root / ".llms-benchmark" / folder / RUN
    if ended:
        record.artifacts.agent_output = "report.md"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "report.md").write_text("# report\n")
    record.save(dest)
    return record


@pytest.mark.parametrize(("case", "code", "next_says"), [
    ("hello ok", 0, "the hello check passed: no row"),
    ("observability ok", 0, f"a row once ruled (llms-benchmark rule {RUN})"),
    ("void", 1, f"no row: enter it as non-conclusive (llms-benchmark inconclusive {RUN})"),
    ("scripted ok", 0, "scripted trajectory: no row"),
    ("scripted void", 1, "scripted trajectory: no row"),
])
def test_wait_prints_the_figures_and_what_the_run_ends_in(project: Project, case: str, code: int, next_says: str):
    _record(project, status=Status.void if "void" in case else Status.ok,
            mission="observability" if "observability" in case or "scripted" in case else "hello",
            environment="replay" if "scripted" in case else "cpu", scripted="scripted" in case)
    got, out, err = project.run_cli(["wait", RUN, "--timeout", "5", "--json"], timeout=60)
    assert got == code, out + err
    done = json.loads(out)
    assert done["probe"] == {"decode_tps": 52.25, "decode_long_tps": 40.5, "prefill_tps": 3120.0}
    assert done["turns"] == 14 and done["tokens"] == {"input": 123456, "output": 7890}
    assert done["report"] == f".llms-benchmark/runs/{RUN}/report.md" and done["next"] == next_says
    assert done["status"] == ("void" if "void" in case else "ok")
    got, out, err = project.run_cli(["wait", RUN, "--timeout", "5"], timeout=60)
    assert got == code, out + err
    assert "probe: decode 52.2 tok/s (long context 40.5), prefill 3,120.0 tok/s" in out, out
    assert "turns: 14; tokens: 123,456 in, 7,890 out" in out and f"report: .llms-benchmark/runs/{RUN}/report.md" in out
    assert f"next: {next_says}" in out, out


def test_a_scripted_preset_refused_before_serving_ends_as_scripted(project: Project):
    """Refused at preflight, the record has no `scripted` (set at the serve) nor stack: its
    environment's stack says it; no figures were measured, and none are made up."""
    record = _record(project, status=Status.refused, environment="replay", folder="refused", ended=True)
    record.stack, record.probe, record.session, record.run = "unknown", None, None, None
    record.save(project.root / ".llms-benchmark" / "refused" / RUN)
    got, out, err = project.run_cli(["wait", RUN, "--timeout", "5", "--json"], timeout=60)
    done = json.loads(out)
    assert got == 2 and done["next"] == "scripted trajectory: no row", out + err
    assert done["probe"] is None and done["turns"] is None and done["report"] is None
    assert done["record"] == f".llms-benchmark/refused/{RUN}/run.json"


@pytest.mark.parametrize(("written", "settled"), [(False, False), (True, False), (True, True)])
def test_a_running_wait_says_whether_the_report_is_persisted(project: Project, written: bool, settled: bool):
    """The mission's own report file (hello: REPORT.md, not report.md) in the run's workspace, and
    whether it has stood unchanged long enough for the slash command to `stop` the run."""
    _record(project, ended=False)
    launches = project.root / ".llms-benchmark" / "launches"
    launches.mkdir(parents=True)
    me = psutil.Process(os.getpid())  # a live "launch": this test's own process
    (launches / f"{RUN}.json").write_text(json.dumps({"run_id": RUN, "pid": me.pid, "created": me.create_time()}))
    workspace = project.root / ".llms-benchmark" / "runs" / RUN / "workspace"
    workspace.mkdir()
    if written:
        (workspace / "REPORT.md").write_text("hello\n")
        if settled:
            old = datetime.now(UTC).timestamp() - 11 * 60
            os.utime(workspace / "REPORT.md", (old, old))
    got, out, err = project.run_cli(["wait", RUN, "--timeout", "0.5", "--json"], timeout=60)
    assert got == 124, out + err
    report = json.loads(out)["report"]
    assert report["file"] == f".llms-benchmark/runs/{RUN}/workspace/REPORT.md" and report["persisted"] is written
    assert report["settled"] is settled and (report["unchanged_s"] is not None) is written
    said = " ".join(err.split())
    assert (f"settled: `llms-benchmark stop {RUN}`" in said) is settled, said
    assert ("report persisted (.llms-benchmark/runs/" in said) is written, said
    assert ("no report persisted yet" in said) is not written, said
