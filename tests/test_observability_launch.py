"""The observability mission's plumbing end to end: the replay stack plays a scripted
trajectory through the real opencode binary that drives the scenario against the real
shop stack, queries all four signals in the real telemetry store, and writes a
contract report; the run record shows phases and signals 4/4, and the run keeps its
own telemetry store."""

from __future__ import annotations

import shutil

import duckdb
import yaml
import pytest

from harness.report import parse_report_file
from conftest import REPO, Project


@pytest.mark.slow
@pytest.mark.timeout(420)
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
    assert phases["drive_s"] == pytest.approx(10, abs=6)  # the trajectory drives a 10-second scenario
    assert phases["preflight_s"] >= 0 and phases["observation_s"] >= 0
    assert rec["times"]["mission_start"] < phases["drive_start"] < phases["drive_end"] < rec["times"]["mission_end"]

    report = parse_report_file(run_dir / "report.md")
    assert [f.number for f in report.findings] == ["1", "2", "G1"]

    # The run keeps its own store: every service left data in each signal.
    with duckdb.connect(str(run_dir / "telemetry.duckdb"), read_only=True) as db:
        for table in ("spans", "metrics", "logs", "profiles"):
            services = {row[0] for row in db.execute(f"SELECT DISTINCT service FROM {table}").fetchall()}
            assert {"shop-api", "shop-mcp", "shop-agent"} <= services, (table, services)
    assert project.ledger() == {}

    # Rulings: the key-matcher names T01 for finding 1 and re-runs its evidence on this
    # run's own telemetry; --accept makes the proposals final.
    shutil.copytree(REPO / "missions" / "observability" / "key", project.root / "missions" / "observability" / "key",
                    dirs_exist_ok=True)
    code, out, err = project.run_cli(["rule", rec["run_id"], "--accept", "--json"], timeout=120)
    assert code == 0, err[-3000:]
    rulings = yaml.safe_load((project.root / "rulings" / f"{rec['run_id']}.yaml").read_text())
    assert rulings["final"] is True
    by_number = {f["number"]: f for f in rulings["findings"]}
    assert by_number["1"]["verdict"] == "held up" and by_number["1"]["defects"] == ["T01-orders-bypass-db-span"]
    assert by_number["2"]["verdict"] == "did not hold up"  # names no planted defect
    assert rulings["recall"] == {"found": ["T01-orders-bypass-db-span"], "planted": 15}
    code, out, err = project.run_cli(["rule", "no-such-run"], timeout=60)
    assert code == 2 and "no run 'no-such-run'" in " ".join(err.split())
