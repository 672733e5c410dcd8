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
import json
from datetime import UTC, datetime, timedelta
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pytest

from harness.verdicts.drive import MIN_REQUESTS, measure_drive
from harness.verdicts.keymatch import draft_rulings
from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP
from harness.verdicts.scoring import score_local

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
    WINDOW["start"] = datetime.now(UTC)
    try:
        env = {**os.environ, **{k: v for k, v in services.env.items() if k != "PATH"}}
        drive = subprocess.run([sys.executable, "-m", "scenario", "run", "--duration", "10", "--vus", "2"],
                               cwd=workspace, env=env, capture_output=True, text=True, timeout=200)
        assert drive.returncode == 0, drive.stderr[-2000:]
        FORGED.update(_forge(services, env))
        WINDOW["end"] = datetime.now(UTC)
    finally:
        services.stop()
    return run / "telemetry.duckdb"


WINDOW: dict[str, datetime] = {}  # the "mission" around the drive
FORGED: dict[str, int] = {}
FORGED_SPAN = "forged by the agent"


def _forge(services, agent_env: dict) -> dict[str, int]:
    """What the agent gets when it tries to write evidence with what it is given (its env)."""
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "shop-api"}}]},
        "scopeSpans": [{"scope": {"name": "agent"}, "spans": [{
            "traceId": "0dd5ce4e0000000000000000000000ff", "spanId": "00000000000000ff", "name": FORGED_SPAN,
            "kind": 2, "startTimeUnixNano": "1000000000", "endTimeUnixNano": "1005000000"}]}]}]})
    codes = {}
    for where, url in (("obs url", agent_env["OBS_URL"]), ("ingest url", services.store_url)):
        codes[where] = httpx.post(f"{url}/v1/traces", content=body, timeout=10,
                                  headers={"Content-Type": "application/json"}).status_code
    return codes


def test_the_agent_cannot_write_the_evidence(store: Path):
    assert FORGED == {"obs url": 401, "ingest url": 401}
    with duckdb.connect(str(store), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans WHERE name = ?", [FORGED_SPAN]).fetchone()[0] == 0
        # ... while every service wrote all four signals with its token.
        for table in ("spans", "metrics", "logs", "profiles"):
            assert {r[0] for r in con.execute(f"SELECT DISTINCT service FROM {table}").fetchall()} >= \
                {"shop-api", "shop-mcp", "shop-agent"}, table
        # Request durations in seconds land in seconds buckets (the SDK's default ones are for ms).
        bounds = con.execute("SELECT bounds FROM metrics WHERE name = 'http.server.request.duration' LIMIT 1")
        assert json.loads(bounds.fetchone()[0])[:3] == [0.005, 0.01, 0.025]


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


def test_the_drive_gate_reads_the_store_not_drive_json(store: Path, tmp_path: Path):
    ua = "llms-benchmark-scenario/"
    drove = measure_drive(store, ua, WINDOW["start"], WINDOW["end"])
    assert drove.problem is None and drove.requests >= MIN_REQUESTS
    assert WINDOW["start"] <= drove.start < drove.end <= WINDOW["end"]
    assert 5 <= (drove.end - drove.start).total_seconds() <= 60  # a 10 s scenario, stopping at its duration
    # A mission whose agent skipped the scenario (and perhaps wrote a drive.json of its own):
    # the store shows no scenario request inside that mission's window, so no row.
    later = WINDOW["end"] + timedelta(seconds=1)
    skipped = measure_drive(store, ua, later, later + timedelta(minutes=10))
    assert skipped.requests == 0 and "never drove the stack" in skipped.problem
    assert "drive.json" in skipped.problem
    assert "no telemetry store" in measure_drive(tmp_path / "none.duckdb", ua, later, later).problem
