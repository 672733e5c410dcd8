"""A verdict is earned, on a real observability store: the mission's own setup starts the
telemetry store and the shop stack, the scenario drives them (10 s, 2 users, as the replay
trajectory does), and the fixture reports of tests/fixtures/reports are ruled against that
store with `rule --accept`'s logic (key-matcher proposals, made final).

- a report made from reading the code (Evidence "code reading" / "none") holds up ≤ 1 of 15;
- three findings whose cited queries re-run to their claims all hold up;
- a false claim whose query returns 0 where it claims 12 does not;
- an empty report scores 0.0, below a report with one confirmed finding."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.keymatch import draft_rulings
from harness.rule import finish
from harness.rulings import HELD_UP
from harness.scoring import score_local

ROOT = Path(__file__).resolve().parents[1]
MISSION = ROOT / "missions" / "observability"
KEY = MISSION / "key" / "defects.yaml"
REPORTS = Path(__file__).resolve().parent / "fixtures" / "reports"

pytestmark = pytest.mark.timeout(300)


def _setup():
    spec = importlib.util.spec_from_file_location("observability_setup_for_verdicts", MISSION / "infra" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A real run's telemetry store: the mission's services, driven by its scenario."""
    run = tmp_path_factory.mktemp("run")
    workspace = run / "workspace"
    shutil.copytree(MISSION / "workspace", workspace, ignore=shutil.ignore_patterns("__pycache__", "drive.json"))
    services = _setup().start(workspace, run)
    try:
        env = {**os.environ, **{k: v for k, v in services.env.items() if k != "PATH"}}
        drive = subprocess.run([sys.executable, "-m", "scenario", "run", "--duration", "10", "--vus", "2"],
                               cwd=workspace, env=env, capture_output=True, text=True, timeout=200)
        assert drive.returncode == 0, drive.stderr[-2000:]
    finally:
        services.stop()
    return run / "telemetry.duckdb"


def rule_report(store: Path, tmp_path: Path, name: str):
    run = tmp_path / ".llms-benchmark" / "runs" / name
    run.mkdir(parents=True)
    shutil.copy2(REPORTS / f"{name}.md", run / "report.md")
    os.symlink(store, run / "telemetry.duckdb")
    return finish(draft_rulings(run, KEY), None)  # what `rule RUN --accept` (no grader) writes


def test_a_code_only_report_holds_up_at_most_one(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "code_only")
    assert rulings.reported == 15 and len({d for f in rulings.findings for d in f.defects}) >= 14
    assert rulings.confirmed <= 1
    for f in rulings.findings:
        assert f.verdict != HELD_UP, (f.number, f.reason)
        assert "no telemetry evidence cited" in f.reason


def test_three_findings_whose_queries_re_run_hold_up(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "three_true")
    assert [f.verdict for f in rulings.findings] == [HELD_UP] * 3, [f.reason for f in rulings.findings]
    assert rulings.recall.found == ["P02-search-detail-fanout", "T01-orders-bypass-db-span",
                                    "T03-constant-category-label"]
    for f in rulings.findings:  # each records its own re-runs first, every one holding
        own = [e for e in f.evidence if e.defect is None]
        assert own and all(e.holds for e in own)


def test_a_false_claim_whose_query_returns_0_does_not_hold_up(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "false_claim")
    (finding,) = rulings.findings
    assert finding.defects  # the key-matcher still maps it to a planted defect ...
    assert finding.verdict != HELD_UP  # ... and the re-run of its own query refutes it
    assert "returned 0 where the finding claims 12" in finding.reason
    assert finding.evidence[0].result == 0 and finding.evidence[0].holds is False


def test_an_empty_report_scores_0_below_one_confirmed(store: Path, tmp_path: Path):
    empty = rule_report(store, tmp_path, "empty")
    assert (empty.reported, empty.confirmed) == (0, 0)
    empty_score = score_local(None, "5m00s", "0%", "0 / 0")
    assert empty_score.score == 0.0
    one = score_local("9000s", "150m00s", "33%", "1 / 3")  # slow, and two of three wrong
    assert one.score > empty_score.score
