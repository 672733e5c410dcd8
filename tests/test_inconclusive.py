"""Issue 47, item 4: a run that made no row is entered as non-conclusive by a harness command,
with its reason, and leaves git as the slash command says: its folder out of `runs/` (ignored),
the entry in `.llms-benchmark/non-conclusive.yaml`, the page rendering it. The real CLI."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from conftest import REPO, Project
from harness.records.record import RowKey, RunRecord, Status, Timestamps

RUN = "20261205T100000Z-cpu-qwen2-5-coder-1-5b-medium-ab12"


def _record(project: Project, status: Status, *, ended: bool = True, scripted: bool = False,
            folder: str = "runs") -> RunRecord:
    launch = datetime(2026, 12, 5, 10, tzinfo=UTC)
    record = RunRecord(
        run_id=RUN, key=RowKey(preset="cpu-qwen2-5-coder-1-5b", effort="medium", effort_requested="medium",
                               gpu="CPU"),
        environment="cpu", stack="local-llamacpp", mission="observability", status=status, scripted=scripted,
        reason="the mission ran past its cap | 600 s\n(5 turns)" if status != Status.ok else None,
        stopped_at="run" if status != Status.ok else None,
        times=Timestamps(launch=launch, end=launch + timedelta(minutes=11) if ended else None))
    record.save(project.root / ".llms-benchmark" / folder / RUN)
    return record


def _page(project: Project):
    shutil.copy2(REPO / ".llms-benchmark" / "non-conclusive.yaml", project.root / ".llms-benchmark")
    return (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes()


def test_a_void_run_becomes_an_entry_and_leaves_runs(project: Project):
    _record(project, Status.void)
    before = _page(project)
    code, out, err = project.run_cli(["inconclusive", RUN, "--json"], timeout=60)
    assert code == 0, out + err
    done = json.loads(out)
    assert done["added"] and done["record"] == f".llms-benchmark/inconclusive/{RUN}/run.json"
    after = (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes()
    assert after.startswith(before)  # comments and earlier entries kept byte for byte
    entries = yaml.safe_load(after)
    assert entries[-1] == {"preset": "cpu-qwen2-5-coder-1-5b", "environment": "cpu", "date": "2026-12-05",
                           "reason": f"observability mission, void at run (run {RUN}): the mission ran past its "
                                     "cap / 600 s (5 turns)"}
    assert not (project.root / ".llms-benchmark" / "runs" / RUN).exists()
    assert (project.root / done["record"]).is_file()
    # Entered once: again, it says so and writes nothing.
    code, out, err = project.run_cli(["inconclusive", RUN, "--json"], timeout=60)
    assert code == 0 and json.loads(out)["added"] is False, out + err
    assert (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes() == after
    # The page shows it.
    page = project.root / "page.md"
    page.write_text("# results\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    code, out, err = project.run_cli(["render", "--page", str(page)], timeout=60)
    assert code == 0 and f"(run {RUN})" in page.read_text(), out + err


def test_a_refused_run_is_entered_where_it_lies(project: Project):
    _record(project, Status.refused, folder="refused")
    _page(project)
    code, out, err = project.run_cli(["inconclusive", RUN, "--json"], timeout=60)
    assert code == 0 and json.loads(out)["record"] == f".llms-benchmark/refused/{RUN}/run.json", out + err


@pytest.mark.parametrize(("case", "said"), [
    ("ok", "it makes a row"), ("running", "has not ended"), ("scripted", "scripted trajectory"),
    ("unknown", "no run"), ("path", "is not a run id"), ("broken-file", "non-conclusive.yaml"),
])
def test_what_cannot_be_entered_is_refused_and_nothing_moves(project: Project, case: str, said: str):
    _record(project, Status.ok if case == "ok" else Status.fault, ended=case != "running", scripted=case == "scripted")
    before = _page(project)
    if case == "broken-file":
        before = b"- preset: x\n  date: soon\n"
        (project.root / ".llms-benchmark" / "non-conclusive.yaml").write_bytes(before)
    run = {"unknown": "20260101T000000Z-nope", "path": f"../runs/{RUN}"}.get(case, RUN)
    code, out, err = project.run_cli(["inconclusive", run], timeout=60)
    assert code == 2 and said in " ".join(err.split()) and "Traceback" not in err, out + err
    assert (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes() == before
    assert (project.root / ".llms-benchmark" / "runs" / RUN / "run.json").is_file()


# --- issue 63, item 4f ------------------------------------------------------------------------

def test_a_scripted_launch_refused_before_serving_is_no_entry(project: Project):
    """A replay preset refused at preflight has no `scripted` on its record (that is set at the
    serve) and no stack yet: its environment's stack says it played a script; no entry."""
    launch = datetime(2026, 12, 5, 10, tzinfo=UTC)
    RunRecord(run_id=RUN, key=RowKey(preset="replay-hello", effort="medium", effort_requested="medium", gpu="unknown"),
              environment="replay", stack="unknown", mission="observability", status=Status.refused,
              reason=f"{project.root}/.vot/presets/replay-hello.yaml: field 'model': no scenario matches",
              stopped_at="preflight", times=Timestamps(launch=launch, end=launch + timedelta(seconds=2))
              ).save(project.root / ".llms-benchmark" / "refused" / RUN)
    before = _page(project)
    code, out, err = project.run_cli(["inconclusive", RUN, "--json"], timeout=60)
    assert code == 2 and "scripted trajectory: no row" in " ".join(err.split()), out + err
    assert (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes() == before
    assert (project.root / ".llms-benchmark" / "refused" / RUN / "run.json").is_file()


def test_a_committed_run_is_refused_and_keeps_its_files(project: Project):
    import subprocess

    _record(project, Status.void)
    (project.root / ".llms-benchmark" / "runs" / RUN / "report.md").write_text("no findings\n")
    before = _page(project)
    for args in (["init", "-q", "."], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a committed run"]):
        subprocess.run(["git", *args], cwd=project.root, check=True, capture_output=True)
    code, out, err = project.run_cli(["inconclusive", RUN], timeout=60)
    assert code == 2 and "is committed" in " ".join(err.split()) and "Traceback" not in err, out + err
    assert (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_bytes() == before
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project.root, capture_output=True, text=True)
    assert status.stdout == "", status.stdout  # nothing tracked was moved or deleted


def test_the_entry_names_no_host_path(project: Project):
    from pathlib import Path

    record = _record(project, Status.refused)
    record.reason = (f"{project.root}/.vot/presets/cpu-qwen2-5-coder-1-5b.yaml: field 'model': weights not found "
                     f"in {Path.home()}/.cache/huggingface (checked from {project.root})")
    record.save(project.root / ".llms-benchmark" / "runs" / RUN)
    _page(project)
    code, out, err = project.run_cli(["inconclusive", RUN, "--json"], timeout=60)
    assert code == 0, out + err
    text = (project.root / ".llms-benchmark" / "non-conclusive.yaml").read_text()
    entry = yaml.safe_load(text)[-1]["reason"]
    assert str(project.root) not in text and str(Path.home()) + "/" not in entry, entry
    assert ".vot/presets/cpu-qwen2-5-coder-1-5b.yaml: field 'model'" in entry and "~/.cache/huggingface" in entry
