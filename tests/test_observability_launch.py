"""The observability mission's plumbing end to end: the replay stack plays a scripted
trajectory through the real opencode binary that drives the scenario against the real
shop stack, queries all four signals in the real telemetry store, and writes a
contract report; the run record shows phases and signals 4/4, and the run keeps its
own telemetry store."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import yaml
import pytest

from harness.verdicts.key import label
from harness.verdicts.report import parse_report_file
from conftest import REPO, Project
from test_replay_server import start_replay, stop_replay


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scripted_observation_records_phases_and_signals(project: Project):
    shutil.copytree(REPO / "missions" / "observability", project.root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"))
    shutil.copy2(REPO / "replay" / "observability.yaml", project.root / "replay")
    shutil.copy2(REPO / ".vot" / "presets" / "replay-observability.yaml", project.root / ".vot" / "presets")

    code, out, err = project.run_cli(["launch", "local", "replay", "replay-observability", "--mission",
                                      "observability", "--probe-long-tokens", "2000"], timeout=360)
    assert code == 0, err[-3000:]
    run_dir, rec = project.only_run()
    assert rec["status"] == "ok" and rec["scripted"] is True
    assert rec["signals"] == ["traces", "metrics", "logs", "profiles"]
    assert rec["files_read_before_drive"] == ["src/shop_api/__main__.py"]  # the trajectory reads it first
    phases = rec["phases"]
    # The trajectory drives a 10-second scenario (longer on a loaded machine, never shorter).
    assert 9 <= phases["drive_s"] <= 90
    assert phases["preflight_s"] >= 0 and phases["observation_s"] >= 0
    assert rec["times"]["mission_start"] < phases["drive_start"] < phases["drive_end"] < rec["times"]["mission_end"]
    # The drive is the harness's (`obs drive` through the sandbox's bridge), its traces tagged
    # with the run's key; the trajectory sent nothing of its own.
    drive = rec["drive"]
    assert (drive["tagged_by"], drive["harness_drives"], drive["own_requests"]) == ("harness key", 1, 0)
    assert drive["requests"] >= 20 and drive["problem"] is None
    assert json.loads((run_dir / "harness-drive-1.json").read_text())["vus"] == 2
    assert json.loads((run_dir / "workspace" / "scenario" / "drive.json").read_text())["vus"] == 2  # by `obs drive`

    report = parse_report_file(run_dir / "report.md")
    assert [f.number for f in report.findings] == ["1", "2", "G1"]

    # The run keeps its own store: every service left data in each signal.
    with duckdb.connect(str(run_dir / "telemetry.duckdb"), read_only=True) as db:
        for table in ("spans", "metrics", "logs", "profiles"):
            services = {row[0] for row in db.execute(f"SELECT DISTINCT service FROM {table}").fetchall()}
            assert {"shop-api", "shop-mcp", "shop-agent"} <= services, (table, services)
    assert project.ledger() == {}

    # Rulings: the key-matcher names T01 for finding 1 and re-runs its evidence on this
    # run's own telemetry; without --accept (no terminal) the file is a draft.
    shutil.copytree(REPO / "missions" / "observability" / "key", project.root / "missions" / "observability" / "key",
                    dirs_exist_ok=True)
    rulings_file = project.root / "rulings" / f"{rec['run_id']}.yaml"
    # Finding 1's evidence is an absence (POST /orders spans have 0 children): it holds against
    # the mission's control stores, where T01's fix gives them their sqlite child. `make setup`
    # makes them; built here if missing (cached, keyed by the mission's hash, which the copy shares).
    from harness.verdicts import controls as ctl

    ctl.build(project.root / "missions" / "observability")
    code, out, err = project.run_cli(["rule", rec["run_id"], "--json"], timeout=120)
    assert code == 0, err[-3000:]
    draft = yaml.safe_load(rulings_file.read_text())
    assert draft["final"] is False
    # The trajectory recorded its findings with `obs finding` (findings.json, copied out by the
    # harness): they are what is ruled; the file is named relative to the project, never absolutely.
    assert (run_dir / "findings.json").is_file() and draft["source"] == "findings.json"
    assert draft["report"] == f".llms-benchmark/runs/{rec['run_id']}/findings.json"
    assert draft["controls"].startswith("drive-matched")  # the trajectory drives 10 s x 2, as the controls were
    by_number = {f["number"]: f for f in draft["findings"]}
    assert by_number["1"]["verdict"] == "held up" and by_number["1"]["defects"] == [label("T01-orders-bypass-db-span")]
    assert by_number["2"]["verdict"] == "did not hold up"  # names no planted defect
    assert draft["recall"] == {"found": [label("T01-orders-bypass-db-span")], "planted": 15}

    # A grader model (a scripted one on loopback, over the real wire) re-checks each
    # finding with its tools; it would hold finding 2 up, which a grader cannot do (only the
    # mechanical check's discriminating evidence raises a finding); --accept makes it final.
    grader = start_grader(project.root / "grader")
    try:
        code, out, err = project.run_cli(["rule", rec["run_id"], "--accept", "--json", "--grader", "lab/judge",
                                          "--grader-url", grader.url], timeout=180)
    finally:
        stop_replay(grader)
    assert code == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["grader_disagreed"] == {} and summary["grader_failed"] == {}
    assert list(summary["grader_refused"]) == ["2"] and "only move a finding down" in summary["grader_refused"]["2"]
    rulings = yaml.safe_load(rulings_file.read_text())
    assert rulings["final"] is True
    by_number = {f["number"]: f for f in rulings["findings"]}
    assert [by_number[n]["ruled_by"] for n in ("1", "2", "G1")] == ["grader:lab/judge", "key-matcher",
                                                                    "grader:lab/judge"]
    assert by_number["2"]["verdict"] == "did not hold up"
    assert by_number["G1"]["verdict"] == "did not hold up"
    assert rulings["recall"] == {"found": [label("T01-orders-bypass-db-span")], "planted": 15}
    served = [json.loads(line) for line in grader.served_log.read_text().splitlines()]
    assert len(served) == 4  # 1: rule; 2: sql, then rule; G1: rule

    # The Local serving row of a page rendered from this record and these rulings.
    page = project.root / "page.md"
    page.write_text("# scripted results\n\n<!-- results:begin -->\n<!-- results:end -->\n\nprose\n")
    code, out, err = project.run_cli(["render", "--page", str(page), "--include-scripted"], timeout=60)
    assert code == 0, err[-3000:]
    rows = [[c.replace("**", "").strip() for c in line.strip("|").split("|")] for line in page.read_text().splitlines()
            if line.startswith("|") and "replay-observability" in line]
    head, detail = rows
    record = json.loads((run_dir / "run.json").read_text())
    seconds = int((datetime.fromisoformat(record["times"]["mission_end"])
                   - datetime.fromisoformat(record["times"]["mission_start"])).total_seconds() + 0.5)
    assert head[1].startswith("[`replay-observability`](") and head[4] == record["key"]["gpu"]
    assert head[7:12] == ["1 / 3", "1 / 0 / 0", f"{seconds // 60}m{seconds % 60:02d}s", "33%", f"{seconds}s"]
    assert detail[8] == str(record["session"]["turns"]) and detail[13:15] == ["4/4", "1/15"]
    assert detail[10] == f"{int(record['session']['tokens']['input'] / 1000 + 0.5)}k"
    assert page.read_text().endswith("\n\nprose\n")
    # Never on the published page.
    code, out, err = project.run_cli(["render", "--include-scripted"], timeout=60)
    assert code == 2 and "never go on the published results page" in err

    code, out, err = project.run_cli(["rule", "no-such-run"], timeout=60)
    assert code == 2 and "no run 'no-such-run'" in " ".join(err.split())


GRADER = """
label: "scripted grader (not a model)"
trajectories:
  - name: finding-1
    match: "Rule finding 1:"
    steps:
      - tool_calls:
          - name: rule
            arguments: {verdict: "held up", kind: Telemetry,
                        reason: "Order traces carry no sqlite child span while product reads do."}
  - name: finding-2
    match: "Rule finding 2:"
    steps:
      - tool_calls:
          - name: sql
            arguments: {query: "SELECT service, max(duration_ms) FROM spans GROUP BY service ORDER BY 2 DESC"}
      - tool_calls:
          - name: rule
            arguments: {verdict: "held up", kind: Perf, reason: "The slowest spans are shop-api's.",
                        evidence: [{query: "SELECT service, max(duration_ms) FROM spans GROUP BY service ORDER BY 2 DESC",
                                    result: "shop-api first"}]}
  - name: finding-G1
    match: "Rule finding G1:"
    steps:
      - tool_calls:
          - name: rule
            arguments: {verdict: "did not hold up", reason: "A remark about the method, not a gap in the telemetry."}
"""


def start_grader(folder: Path):
    replay = start_replay(folder, trajectory_text=GRADER, model="judge")
    replay.url += "/v1"
    return replay


FAKE_DRIVE = ("python -c \"import httpx, os; [httpx.get(os.environ['SHOP_API_URL'] + '/products', "
              "headers={'User-Agent': 'llms-benchmark-scenario/20261202T100000Z'}) for _ in range(25)]\" "
              "&& python -m scenario run --duration 10 --vus 2 > /dev/null && echo sent")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_drive_the_harness_did_not_run_is_void(project: Project):
    """The issue's forged drive, from inside the sandbox: 25 requests with the scenario's
    User-Agent, then the scenario itself run by hand (its source is in the workspace) -
    everything but `obs drive`. No tagged trace: void with the gate's reason, the traffic on
    the record as the agent's own."""
    shutil.copytree(REPO / "missions" / "observability", project.root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"))
    trajectory = yaml.safe_load((REPO / "replay" / "observability.yaml").read_text())
    report = trajectory["trajectories"][1]["steps"][-2]  # the trajectory's own report
    trajectory["trajectories"][1]["steps"] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": FAKE_DRIVE, "description": "Drive",
                                                       "timeout": 120000}}]},
        report, {"text": "DONE"}]
    project.add_trajectory("forged-drive", trajectory)
    preset = yaml.safe_load((REPO / ".vot" / "presets" / "replay-observability.yaml").read_text())
    project.add_preset("replay-forged-drive", yaml.safe_dump({
        **preset, "name": "replay-forged-drive", "served_model_name": "replay-forged-drive",
        "model": "replay/forged-drive.yaml"}))
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-forged-drive", "--mission",
                                      "observability", "--probe-long-tokens", "2000"], timeout=480)
    run_dir, rec = project.only_run()
    assert code == 1 and rec["status"] == "void", (code, rec.get("reason"), err[-2000:])
    assert "sent" in (run_dir / "opencode-events.jsonl").read_text()  # the fake drive did run
    drive = rec["drive"]
    assert drive["tagged_by"] == "harness key" and drive["harness_drives"] == 0 and drive["requests"] == 0
    assert drive["forged"] >= 25 and drive["own_requests"] >= drive["forged"]
    assert "never drove the stack" in rec["reason"] and "without the harness's tag" in rec["reason"]
    assert "obs drive" in rec["reason"]
    assert project.ledger() == {}
