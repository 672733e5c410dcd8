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
from pathlib import Path

import duckdb
import httpx
import pytest

from harness.verdicts.drive import MIN_REQUESTS, measure_drive
from harness.verdicts.key import label
from harness.verdicts.keymatch import draft_rulings
from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP
from harness.verdicts.scoring import score_local
from observed_drive import showing_b01

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
    """A real run's telemetry store: the mission's services, driven by its scenario; driven again
    (a fresh run) while B01's race did not show (tests/observed_drive.py says why)."""
    return showing_b01(lambda: _run_once(tmp_path_factory.mktemp("run")), "runs")


def _run_once(run: Path) -> Path:
    workspace = run / "workspace"
    shutil.copytree(MISSION / "workspace", workspace, ignore=shutil.ignore_patterns("__pycache__", "drive.json"))
    services = _setup().start(workspace, run)
    WINDOW["start"] = datetime.now(UTC)
    try:
        env = {**os.environ, **{k: v for k, v in services.env.items() if k != "PATH"}}
        services.drive.drive({"duration": 10, "vus": 2})  # what `obs drive` asks the harness for
        WINDOW["forge"] = datetime.now(UTC)
        FORGED.update(_forge(services, env))
        for _ in range(CURLS):  # a drive faked with the User-Agent the agent reads in scenario/run.py
            httpx.get(f"{env['SHOP_API_URL']}/products", params={"category": "toys"}, timeout=10,
                      headers={"User-Agent": "llms-benchmark-scenario/20261202T100000Z"})
        WINDOW["end"] = datetime.now(UTC)
    finally:
        services.stop()
    DRIVE.update(key=services.drive.key, windows=services.drive.windows())
    return run / "telemetry.duckdb"


CURLS = 25
DRIVE: dict = {}


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


def as_the_store_says(text: str, store: Path) -> str:
    """An honest report quotes the numbers its store returns: each "`SELECT ...` → N" of the
    fixture gets N from this (freshly driven) store, whose counts vary with the machine's load."""
    import re

    with duckdb.connect(str(store), read_only=True) as con:
        def fill(m):
            value = con.execute(m.group(1)).fetchone()[0]
            value = 0 if value is None else value
            return f"`{m.group(1)}` → {int(value) if float(value).is_integer() else value}"

        return re.sub(r"`((?:SELECT|WITH) [^`]+)` → \d+(?:\.\d+)?", fill, text)


def rule_report(store: Path, tmp_path: Path, name: str, controls=None, honest: bool = False):
    run = tmp_path / ".llms-benchmark" / "runs" / name
    run.mkdir(parents=True)
    text = (REPORTS / f"{name}.md").read_text()
    (run / "report.md").write_text(as_the_store_says(text, store) if honest else text)
    os.symlink(store, run / "telemetry.duckdb")
    return finish(draft_rulings(run, KEY, controls=controls), None)  # what `rule RUN --accept` (no grader) writes


@pytest.fixture(scope="module", params=["without control stores", "with control stores"])
def controls(request):
    """Both ways a machine rules: before `make setup` made the mission's control stores (the
    word-and-literal rules, absences not evidence), and with them (a query counts only where it
    reads differently with the defect fixed). Built here when missing (cached, ~6 min on 2 cores)."""
    if request.param == "without control stores":
        yield None
        return
    from harness.verdicts import controls as ctl

    ctl.build(MISSION)
    found = ctl.Controls.for_mission(MISSION)
    yield found
    found.close()


def test_a_code_only_report_holds_up_at_most_one(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "code_only")  # each row states the claim of a planted defect
    assert rulings.reported == 15 and len({d for f in rulings.findings for d in f.defects}) >= 13
    assert rulings.confirmed <= 1
    for f in rulings.findings:
        assert f.verdict != HELD_UP, (f.number, f.reason)
        assert "no telemetry evidence cited" in f.reason


def test_three_findings_whose_queries_re_run_hold_up(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "three_true")
    assert [f.verdict for f in rulings.findings] == [HELD_UP] * 3, [f.reason for f in rulings.findings]
    assert rulings.recall.found == sorted([label("P02-search-detail-fanout"), label("T01-orders-bypass-db-span"),
                                           label("T03-constant-category-label")])
    for f in rulings.findings:  # each records its own re-runs first, every one holding
        own = [e for e in f.evidence if e.defect is None]
        assert own and all(e.holds for e in own)


def test_a_false_claim_whose_query_returns_0_does_not_hold_up(store: Path, tmp_path: Path):
    rulings = rule_report(store, tmp_path, "false_claim")
    (finding,) = rulings.findings
    # Its words name no planted defect (issue 34: a defect is named by the claim, never by its
    # SQL's literals), and the re-run of its own query refutes it either way.
    assert finding.verdict != HELD_UP
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
    drove = measure_drive(store, ua, WINDOW["start"], WINDOW["end"], **DRIVE)
    assert drove.problem is None and drove.requests >= MIN_REQUESTS and drove.tagged_by == "harness key"
    assert WINDOW["start"] <= drove.start < drove.end <= WINDOW["forge"]
    assert 5 <= (drove.end - drove.start).total_seconds() <= 60  # a 10 s scenario, stopping at its duration
    # Every trace the real stack served for the harness's drive carries its tag (the services'
    # calls to each other included); the faked ones are the agent's own traffic, and only they.
    assert (drove.own_requests, drove.forged) == (CURLS, CURLS)
    # The faked drive alone (its window): not a drive, with the gate's reason.
    faked = measure_drive(store, ua, WINDOW["forge"], WINDOW["end"], **DRIVE)
    assert faked.requests == 0 and faked.forged == CURLS and "without the harness's tag" in faked.problem
    # A mission whose agent skipped the scenario (and perhaps wrote a drive.json of its own):
    # the store shows no scenario request inside that mission's window, so no row.
    later = WINDOW["end"] + timedelta(seconds=1)
    skipped = measure_drive(store, ua, later, later + timedelta(minutes=10))
    assert skipped.requests == 0 and "never drove the stack" in skipped.problem
    assert "drive.json" in skipped.problem
    assert "no telemetry store" in measure_drive(tmp_path / "none.duckdb", ua, later, later).problem


# --- evidence that discriminates (issue 20): adversarial and honest reports on the real store ----------

def _rule_text(store: Path, tmp_path: Path, name: str, text: str, controls=None):
    run = tmp_path / ".llms-benchmark" / "runs" / name
    run.mkdir(parents=True)
    (run / "report.md").write_text(text)
    os.symlink(store, run / "telemetry.duckdb")
    return finish(draft_rulings(run, KEY, controls=controls), None)


HEAD = ("---\nservices: [shop-api, shop-mcp, shop-agent]\nwindow: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z\n"
        "mode: drive\n---\n\n## Anomalies\n\n| # | Finding | Kind | Severity | Evidence |\n|---|---|---|---|---|\n")


def _row(text: str, evidence: str, kind: str = "Telemetry") -> str:
    return f"{HEAD}| 1 | {text} | {kind} | high | {evidence} |\n\n## Telemetry gaps\n"


@pytest.mark.timeout(900)
def test_an_adversarial_report_holds_up_nothing_and_leaks_nothing(store: Path, tmp_path: Path, controls):
    import time

    from harness.verdicts.rulings import save_rulings

    t0 = time.monotonic()
    rulings = rule_report(store, tmp_path, "adversarial", controls)
    took = time.monotonic() - t0
    assert len(rulings.findings) >= 15
    assert rulings.confirmed == 0 and [f.number for f in rulings.findings if f.verdict == HELD_UP] == []
    assert took < 60, took  # one 10 s interrupt (the cross join), the rest refused or quick
    path = save_rulings(rulings, tmp_path / "rulings.yaml")
    text = path.read_text()
    first = Path("/etc/passwd").read_text().splitlines()[0]
    assert first not in text and str(store.resolve()) not in text and str(Path.home()) + "/" not in text
    assert "T01-" not in " ".join(f.reason for f in rulings.findings)  # no key id in any reason
    assert len(text) < 100_000


# One row each, so that no restatement hides the reason it fails for.
ADVERSARIAL = {
    "generic count, wrong mechanism": (
        "POST /orders leaks a sqlite connection: place_order in src/shop_api/app.py never closes it",
        "`SELECT count(*) FROM spans WHERE service = 'shop-api'` → 333", "none that re-ran to its claim reads"),
    "constant behind a comment": (
        "POST /orders spans have no sqlite database child span: place_order in src/shop_api/app.py skips db.query",
        "`SELECT 40 /* FROM spans WHERE name = 'POST /orders' AND attributes->>'$.\"db.system.name\"' = 'sqlite' */`"
        " → 40", "reads no telemetry table"),
    "constant over a real table": (
        "Every shop.orders.placed point carries the constant product.category general: src/shop_api/app.py "
        "place_order", "`SELECT 12 FROM metrics WHERE name = 'shop.orders.placed' LIMIT 1` → 12", "constant"),
    "constant hidden in arithmetic": (
        "POST /orders spans have no sqlite database child span: place_order in src/shop_api/app.py skips db.query",
        "`SELECT 7 + 0 * count(*) FROM spans WHERE attributes->>'$.\"db.system.name\"' = 'sqlite'` → 7",
        "constant written into its own select list"),
    "the opposite claimed as an absence": (
        "shop-mcp client spans carry no http.method at all: src/shop_mcp/api.py call",
        "`SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\"http.method\"' = 'BREW'` → 0",
        "claims an absence"),
    "right file, wrong function": (
        "GET /stats reads every product row and aggregates in Python: src/shop_api/app.py get_product",
        "`SELECT max(CAST(attributes->>'$.\"db.response.returned_rows\"' AS INTEGER)) FROM spans WHERE name LIKE "
        "'SELECT%' AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'GET /stats')` → 3000",
        "does not accuse the defect's code"),
    "a function of that name in another file": (
        "POST /orders spans never get a sqlite database child span: place_order in src/shop_mcp/server.py",
        "`SELECT count(*) FROM spans s WHERE s.name = 'GET /products/{product_id}' AND EXISTS (SELECT 1 FROM spans "
        "c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\"db.system.name\"' = 'sqlite')` → 109",
        "does not accuse the defect's code"),
    "a function that does not exist": (
        "POST /orders spans never get a sqlite database child span: src/shop_api/app.py handle_order_write",
        "`SELECT count(*) FROM spans s WHERE s.name = 'GET /products/{product_id}' AND EXISTS (SELECT 1 FROM spans "
        "c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\"db.system.name\"' = 'sqlite')` → 109",
        "handle_order_write() in app.py, which the mission's sources lack"),
    "a number in the Finding text": (
        "GET /stats selects 12 rows per call and aggregates them in Python: src/shop_api/app.py: the stats handler",
        "`SELECT max(CAST(attributes->>'$.\"db.response.returned_rows\"' AS INTEGER)) FROM spans WHERE name LIKE "
        "'SELECT%' AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'GET /stats')`",
        "its text says 12, which no cited query re-ran to"),
    "a host file": (
        "POST /orders spans have no sqlite database child span: place_order in src/shop_api/app.py",
        "`SELECT * FROM read_text('/etc/passwd')` → 1 row", "table function read_text"),
    "a host directory": (
        "POST /orders spans have no sqlite database child span: place_order in src/shop_api/app.py",
        "`SELECT count(*) FROM glob('/etc/*')` → 50", "table function glob"),
    "an http path": (
        "shop-mcp's client spans use the retired http.method: src/shop_mcp/api.py call",
        "`SELECT count(*) FROM 'http://127.0.0.1:9/spans.parquet'` → 10", "not one of the store's tables"),
    "the database's own settings": (
        "shop-mcp's client spans use the retired http.method: src/shop_mcp/api.py call",
        "`SELECT count(*) FROM duckdb_settings() WHERE value LIKE '%/%'` → 3", "table function duckdb_settings"),
    "a comment naming the defect's literals": (
        "POST /orders spans have no sqlite database child: place_order in src/shop_api/app.py skips db.query",
        "`SELECT count(*) FROM spans /* WHERE attributes->>'$.\"db.system.name\"' = 'sqlite' */ WHERE service = "
        "'shop-api'` → 333", "none that re-ran to its claim reads"),
    "a constant through a CTE": (
        "Every shop.orders.placed point carries the one constant product.category general: src/shop_api/app.py "
        "place_order", "`WITH x AS (SELECT 42 AS n) SELECT n FROM x` → 42", "reads no telemetry table"),
}


# The claim each adversarial row states (issue 48): the defect it would be credited with.
T01, T03, T04, P03 = ("missing-signal, absent, shop-api", "wrong-signal, lower, shop-api", "wrong-signal, present, shop-mcp",
                      "over-fetch, higher, shop-api")
ADVERSARIAL_CLAIMS = {
    "generic count, wrong mechanism": T01, "constant behind a comment": T01, "constant over a real table": T03,
    "constant hidden in arithmetic": T01, "the opposite claimed as an absence": "wrong-signal, absent, shop-mcp",
    "right file, wrong function": P03, "a function of that name in another file": T01,
    "a function that does not exist": T01, "a number in the Finding text": P03, "a host file": T01,
    "a host directory": T01, "an http path": T04, "the database's own settings": T04,
    "a comment naming the defect's literals": T01, "a constant through a CTE": T03,
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_each_false_finding_class_does_not_hold_up(store: Path, tmp_path: Path, case: str, controls):
    text, evidence, why = ADVERSARIAL[case]
    text = f"{text} [claim: {ADVERSARIAL_CLAIMS[case]}]"
    rulings = _rule_text(store, tmp_path, "adv", _row(text, evidence), controls)
    (f,) = rulings.findings
    assert f.verdict != HELD_UP and rulings.confirmed == 0, f.reason
    if controls is not None and why in ("none that re-ran to its claim reads", "claims an absence",
                                        "constant written into its own select list"):
        why = "read differently with the named defect fixed"  # the control store's words for it
    assert why in f.reason, f.reason


def test_one_row_listing_every_symptom_counts_nothing(store: Path, tmp_path: Path):
    text = ("Everything is broken: no db child span, constant category label, retired http.method, duration never "
            "recorded, logs unexported, output tokens mislabelled, httpx client per call, search fan-out, stats "
            "whole table, json.dumps, sync model call, order ref collision, retries on 404, qty vs quantity "
            "(src/shop_api/app.py place_order stats, src/shop_mcp/api.py call, src/shop_mcp/server.py "
            "search_products place_order, src/shop_agent/model.py complete)")
    rulings = _rule_text(store, tmp_path, "bundle", _row(
        text, "`SELECT 1 /* FROM spans JOIN metrics JOIN logs JOIN profiles 'shop' 'sqlite' 'general' */` → 1",
        "Behavior"))
    (f,) = rulings.findings
    assert (f.verdict, f.counts, rulings.confirmed, rulings.reported) == ("did not hold up", 1, 0, 1)


def test_an_honest_row_is_credited_with_its_own_defect_only(store: Path, tmp_path: Path):
    # An honest T01 row that also mentions GET /stats and json.dumps: word overlap credits nothing more.
    honest = (REPORTS / "honest_all.md").read_text().split("| 1 | ")[1].split("\n")[0]
    text, kind, sev, evidence = [c.strip() for c in honest.rstrip(" |").split(" | ")]
    text += "; GET /stats also reads every product row and renders json.dumps in stats()"
    rulings = _rule_text(store, tmp_path, "one", _row(text, evidence))
    (f,) = rulings.findings
    assert f.verdict == HELD_UP and f.defects == [label("T01-orders-bypass-db-span")] and f.counts == 1, f.reason


def test_separate_evidence_for_each_defect_credits_each(store: Path, tmp_path: Path):
    rows = (REPORTS / "honest_all.md").read_text()
    p03 = rows.split("| 9 | ")[1].split("\n")[0].rstrip(" |").split(" | ")
    p04 = rows.split("| 10 | ")[1].split("\n")[0].rstrip(" |").split(" | ")
    text = (f"GET /stats is costly in src/shop_api/app.py, the stats handler: 8a) {p03[0]} 8b) {p04[0]}")
    report = as_the_store_says(f"{HEAD}| 8 | {text} | Perf | high | 8a: {p03[3]}; 8b: {p04[3]} |\n\n## Telemetry gaps\n",
                               store)
    rulings = _rule_text(store, tmp_path, "subs", report)
    assert [(f.number, f.verdict, f.defects) for f in rulings.findings] == [
        ("8a", HELD_UP, [label("P03-stats-reads-whole-table")]), ("8b", HELD_UP, [label("P04-stats-payload-rendered")])]
    # Two defects on one row with ONE query that reads both: credited once, not twice.
    text = ("POST /orders spans never get a sqlite database child span (place_order in src/shop_api/app.py skips "
            "db.query) and shop-mcp client spans carry the retired http.method, not http.request.method "
            "(src/shop_mcp/api.py call) [claim: missing-signal, absent, shop-api]")
    query = ("`SELECT count(*) FROM spans WHERE attributes->>'$.\"db.system.name\"' = 'sqlite' "
             "OR attributes->>'$.\"http.method\"' IS NOT NULL`")
    rulings = _rule_text(store, tmp_path, "shared", _row(text, query))
    (f,) = rulings.findings
    assert f.verdict == HELD_UP and f.counts == 1 and len(f.defects) == 1, f.reason
    # ... and with a query of its own for each, still once (issue 48): a row states one claim, and
    # is credited with the one defect that claim matches; the other needs a row of its own.
    both = query.replace(" OR ", "` → 1; `SELECT count(*) FROM spans WHERE ").replace("SELECT count(*) FROM spans WHERE attributes->>'$.\"db", "SELECT count(*) FROM spans WHERE attributes->>'$.\"db", 1)
    rulings = _rule_text(store, tmp_path, "separate", _row(text, both.replace("` → 1;", "`;")))
    (f,) = rulings.findings
    assert f.verdict == HELD_UP and f.counts == 1 and f.defects == [label("T01-orders-bypass-db-span")], f.reason


def test_too_many_cited_queries_do_not_hold_up_and_finish_fast(store: Path, tmp_path: Path):
    import time

    from harness.verdicts.rulings import save_rulings

    evidence = "; ".join(["`SELECT count(*) FROM spans WHERE name = 'GET /stats'` → 8"] * 3000)
    t0 = time.monotonic()
    rulings = _rule_text(store, tmp_path, "many", _row(
        "GET /stats selects every product row and column and aggregates in Python: src/shop_api/app.py stats",
        evidence, "Perf"))
    assert time.monotonic() - t0 < 30
    (f,) = rulings.findings
    # Issue 34: a 180 KB cell is a named problem before any query is counted (4,000 characters read).
    assert f.verdict != HELD_UP and "179,998 characters, over the 4,000 read" in f.reason
    assert save_rulings(rulings, tmp_path / "r.yaml").stat().st_size < 50_000


@pytest.mark.timeout(900)
def test_honest_findings_hold_up_each_counted_once(store: Path, tmp_path: Path, controls):
    rulings = rule_report(store, tmp_path, "honest_all", controls, honest=True)
    by = {f.number: f for f in rulings.findings}
    anomalies = [f for f in rulings.findings if not f.number.startswith("G")]
    assert len(anomalies) == 14 and all(f.counts == 1 and len(f.defects) == 1 for f in anomalies)
    assert len({f.defects[0] for f in anomalies}) == 14
    # Every planted defect shows in every drive, short and loaded ones too: an order that runs
    # out of stock (T02) and colliding order refs (B01, the scenario's rushes) are on schedule.
    unseen = [f for f in anomalies if f.verdict != HELD_UP]
    assert unseen == [], [(f.number, f.reason) for f in unseen]
    # T06 is an absence only (its logs never reach the store). Without control stores an absence
    # is not evidence, so the honest gap does not hold up -- said so, not hidden; with them, the
    # T06 control holds the logger's lines, so the absence discriminates and holds.
    if controls is None:
        assert by["G1"].verdict != HELD_UP and "claims an absence" in by["G1"].reason
        assert (rulings.confirmed, rulings.reported) == (14, 15)
    else:
        assert by["G1"].verdict == HELD_UP and "with that defect fixed" in by["G1"].reason, by["G1"].reason
        assert (rulings.confirmed, rulings.reported) == (15, 15)
        assert all("with that defect fixed" in f.reason for f in rulings.findings if f.verdict == HELD_UP)
