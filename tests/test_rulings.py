"""Rulings and the key-matcher: proposals re-run on the run's own telemetry store, counts
(every row reported, a restatement too; bundles once per defect), recall, the file's round trip, and bad input
refused with one error naming the file and the finding."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml

from harness.errors import UserError
from harness.verdicts.key import label, load_key, name_defects
from harness.verdicts.keymatch import NO_DEFECT_REASON, draft_rulings
from harness.verdicts.report import Finding
from harness.verdicts.rulings import HELD_UP, NOT_HELD_UP, Rulings, load_rulings, save_rulings
from harness.telemetry.schema import DDL

KEY = Path(__file__).resolve().parents[1] / "missions" / "observability" / "key" / "defects.yaml"

REPORT = """---
services: [shop-api, shop-mcp, shop-agent]
window: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z
mode: drive
---
# Observation report

## Anomalies

| # | Finding | Kind | Severity | Evidence |
|---|---------|------|----------|----------|
| 1 | POST /orders spans have no database child span, unlike GET /products/{product_id}: place_order in src/shop_api/app.py skips db.query [claim: missing-signal, absent, shop-api] | Telemetry | high | `obs sql "SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\\"db.system.name\\"' = 'sqlite')"` → 0 traces; `obs sql "SELECT count(*) FROM spans s WHERE s.name = 'GET /products/{product_id}' AND EXISTS (SELECT 1 FROM spans c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\\"db.system.name\\"' = 'sqlite')"` → 1 |
| 2 | GET /stats spends its CPU in json.dumps rendering the catalog, in stats() of src/shop_api/app.py [claim: redundant-work, higher, shop-api] | Perf | medium | `obs profiles top --service shop-api` → json:dumps 40 % self |
| 3 | Order writes go to SQLite without a db child span under POST /orders [claim: missing-signal, absent, shop-api:POST /orders] | Telemetry | medium | same query as finding 1 |
| 4 | shop-mcp exports no logs at all, and shop.orders.placed carries the constant product.category "general" (src/shop_api/app.py place_order, src/shop_mcp/api.py call) [claim: wrong-signal, lower, shop-api] | Telemetry | medium | `obs logs search --service shop-mcp` → 0; `obs metrics query shop.orders.placed --by product.category` → one series |
| 5 | The slowest spans belong to shop-api [claim: latency, higher, shop-api] | Perf | low | `obs traces search --limit 5` → 5 spans |

## Telemetry gaps

- gen_ai.client.operation.duration is absent although chat spans exist (complete() in src/shop_agent/model.py) [claim: missing-signal, absent, shop-agent] — `obs metrics list`
"""


def _store(path: Path) -> None:
    con = duckdb.connect(str(path))
    for sql in DDL.values():
        con.execute(sql)

    def span(trace, sid, parent, service, name, kind="SERVER", status="UNSET", attrs=None):
        con.execute(
            "INSERT INTO spans (trace_id, span_id, parent_span_id, service, name, kind, start_ns, end_ns, "
            "duration_ms, status_code, attributes, resource, scope, events) "
            "VALUES (?, ?, ?, ?, ?, ?, 0, 1000000, 1.0, ?, ?, '{}', 'test', '[]')",
            [trace, sid, parent, service, name, kind, status, json.dumps(attrs or {})])

    # T01 holds: POST /orders has no sqlite child; GET /products/{product_id} has one.
    span("t1", "s1", None, "shop-api", "POST /orders")
    span("t2", "s2", None, "shop-api", "GET /products/{product_id}")
    span("t2", "s3", "s2", "shop-api", "SELECT products", kind="CLIENT", attrs={"db.system.name": "sqlite"})
    # T06 holds: failed shop-mcp client calls, and no shop_mcp.api log records.
    span("t3", "s4", None, "shop-mcp", "GET", kind="CLIENT", status="ERROR")
    # T03 holds: every point of shop.orders.placed carries category "general".
    for t in (1, 2):
        con.execute("INSERT INTO metrics (service, name, type, time_ns, value, attributes) "
                    "VALUES ('shop-api', 'shop.orders.placed', 'sum', ?, ?, ?)",
                    [t, float(t), json.dumps({"product.category": "general"})])
    # T05 does not hold: the duration metric is absent, but so are chat spans.
    # P04 does not hold: no profiles at all.
    con.close()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / ".llms-benchmark" / "runs" / "20261130T010000Z-test-run"
    run.mkdir(parents=True)
    (run / "report.md").write_text(REPORT)
    _store(run / "telemetry.duckdb")
    return run


def test_key_matcher_proposals(run_dir: Path):
    r = draft_rulings(run_dir, KEY)
    assert r.run_id == run_dir.name and r.final is False
    by = {f.number: f for f in r.findings}
    assert list(by) == ["1", "2", "3", "4", "5", "G1"]
    assert all(f.ruled_by == "key-matcher" for f in r.findings)

    one = by["1"]  # its absence (→ 0) is no evidence by itself; its contrast (→ 1) is, and the code is named
    assert one.defects == [label("T01-orders-bypass-db-span")] and one.verdict == HELD_UP and one.counts == 1
    # Matched on the claim it states (issue 48), never on its words.
    assert "its stated claim (missing-signal, absent, shop-api) is one the key states" in one.reason
    assert "cited query 2" in one.reason
    own = one.evidence  # the finding's own re-runs only: the key's SQL and ids stay out (issue 34)
    assert [(e.query.split()[:2], e.result, e.holds, e.defect) for e in own] == [
        (["obs", "sql"], 0, True, None), (["obs", "sql"], 1, True, None)]
    # The key's own check by a count alone (issue 63): its queries and expectations stay hidden.
    assert "it reads 1 on this run" in one.reason and "(2 of 2 of its readings as expected)" in one.reason
    assert "value ==" not in one.reason and "value >" not in one.reason
    # The key's ids never leak into a reason (they name the hidden key's defects).
    assert not any(d.id in f.reason or d.id.split("-")[0] + ":" in f.reason for f in r.findings for d in load_key(KEY))

    two = by["2"]  # named, but no profile in this run's store: its own query and the key's come back empty
    # Its claim (redundant-work at stats) is a reasonable statement of P03 and of P04 (issue 59).
    assert two.defects[0] in (label("P03-stats-reads-whole-table"), label("P04-stats-payload-rendered"))
    assert two.verdict == NOT_HELD_UP and two.counts == 1
    assert (two.evidence[0].result, two.evidence[0].holds) == ("0 rows", False)
    assert "returned no rows where the finding claims 40" in two.reason

    three = by["3"]  # restates finding 1: still a row the report made, so it counts (seed 000, issue 59)
    assert three.defects == [label("T01-orders-bypass-db-span")]
    assert (three.counts, three.restates, three.verdict) == (1, "1", NOT_HELD_UP)
    assert "restates finding 1" in three.reason

    four = by["4"]  # its stated claim matches T02's and T03's; only T03 has a query of its own (and its code first)
    assert four.defects == [label("T03-constant-category-label")]
    assert four.verdict == HELD_UP and four.counts == 1

    five = by["5"]  # latency on shop-api is a reasonable claim of a Perf defect there (issue 59), but
    # its query measures none and it accuses no code (its query re-run, for the person ruling)
    assert five.verdict == NOT_HELD_UP and five.counts == 1
    assert "does not accuse the defect's code" in five.reason
    assert [e.holds for e in five.evidence] == [True]

    gap = by["G1"]  # named; `obs metrics list` reads no literal of T05's, and half the key's evidence is false
    assert gap.defects == [label("T05-operation-duration-declared-unrecorded")] and gap.verdict == NOT_HELD_UP

    assert r.reported == 6  # every row, the restatement included
    assert r.confirmed == 2
    assert r.by_kind == {"Telemetry": 2, "Perf": 0, "Behavior": 0}
    assert r.accuracy == 33
    assert r.recall.found == sorted([label("T01-orders-bypass-db-span"), label("T03-constant-category-label")])
    assert r.recall.planted == 15


def test_the_store_is_opened_read_only(run_dir: Path):
    # Another process reads the store meanwhile (as the agent's query endpoint may): both are readers.
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; "
                               "c = duckdb.connect(sys.argv[1], read_only=True); print('open', flush=True); "
                               "time.sleep(60)", str(run_dir / "telemetry.duckdb")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        r = draft_rulings(run_dir, KEY)
    finally:
        holder.kill()
        holder.wait()
    assert r.finding("1").verdict == HELD_UP


def test_a_run_without_a_store_holds_up_nothing(run_dir: Path):
    (run_dir / "telemetry.duckdb").unlink()
    r = draft_rulings(run_dir, KEY)
    assert r.confirmed == 0 and r.recall.found == []
    assert "no telemetry store" in str(r.finding("1").evidence[0].result)


def test_a_single_finding_at_a_shared_location_names_one_defect():
    defects = load_key(KEY)
    finding = Finding(number="1", text="GET /stats reads every product row and aggregates in Python", kind="Perf",
                      section="anomalies")
    assert [m.defect.id for m in name_defects(finding, defects)] == ["P03-stats-reads-whole-table"]
    bundle = finding.model_copy(update={"text": "GET /stats reads the whole product table and renders it with "
                                                "json.dumps on every call"})
    assert {m.defect.id for m in name_defects(bundle, defects)} == {"P03-stats-reads-whole-table",
                                                                    "P04-stats-payload-rendered"}


def test_round_trip(run_dir: Path, tmp_path: Path):
    r = draft_rulings(run_dir, KEY)
    path = save_rulings(r, tmp_path / "rulings" / f"{r.run_id}.yaml")
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    back = load_rulings(path, report=run_dir / "report.md")
    assert back == r
    assert (back.confirmed, back.reported, back.accuracy) == (2, 6, 33)  # the restatement is reported too
    # A person rules finding 5 held up, and finalises.
    data = yaml.safe_load(path.read_text())
    data["findings"][4].update(verdict="held up", ruled_by="person", evidence="`obs traces search` → shop-api 5/5",
                               reason="The five slowest spans are all shop-api's.")
    data["final"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ruled = load_rulings(path)
    assert ruled.final and ruled.confirmed == 3 and ruled.by_kind["Perf"] == 1 and ruled.accuracy == 50
    assert ruled.finding("5").evidence[0].query.startswith("`obs traces search`")


def _bad(run_dir: Path, tmp_path: Path, change) -> UserError:
    path = save_rulings(draft_rulings(run_dir, KEY), tmp_path / "bad.yaml")
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError) as info:
        load_rulings(path, report=run_dir / "report.md")
    return info.value


def test_unknown_verdict(run_dir: Path, tmp_path: Path):
    err = _bad(run_dir, tmp_path, lambda d: d["findings"][1].update(verdict="confirmed"))
    assert err.file.endswith("bad.yaml") and "finding 2" in err.message and "'confirmed'" in err.message
    assert "bad.yaml" in str(err) and err.field == "verdict"


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_missing_reason(run_dir: Path, tmp_path: Path, reason):
    def change(d):
        if reason is None:
            del d["findings"][5]["reason"]
        else:
            d["findings"][5]["reason"] = reason
    err = _bad(run_dir, tmp_path, change)
    assert "bad.yaml" in str(err) and "finding G1" in err.message and "reason" in str(err)


def test_finding_not_in_the_report(run_dir: Path, tmp_path: Path):
    err = _bad(run_dir, tmp_path, lambda d: d["findings"][4].update(number="9"))
    assert "bad.yaml" in str(err) and "finding 9" in err.message and "not in the report" in err.message


def test_several_problems_are_one_error(run_dir: Path, tmp_path: Path):
    def change(d):
        d["findings"][0]["verdict"] = "maybe"
        d["findings"][1]["reason"] = ""
    err = _bad(run_dir, tmp_path, change)
    assert "2 problems" in err.message and "finding 1" in err.message and "finding 2" in err.message


def test_restatement_counts_one_and_ruled_by_is_known():
    base = {"run_id": "r", "report": "report.md", "ruled_at": "2026-11-30T01:00:00Z",
            "findings": [{"number": 1, "verdict": "held up", "kind": "Perf", "reason": "x.", "ruled_by": "person"}]}
    assert Rulings.model_validate(base).findings[0].number == "1"
    bad = json.loads(json.dumps(base))
    bad["findings"].append({"number": 2, "verdict": "did not hold up", "reason": "restates 1.",
                            "ruled_by": "grader:gpt-x", "counts": 2, "restates": 1})
    with pytest.raises(ValueError, match="restatement counts 1"):
        Rulings.model_validate(bad)
    bad["findings"][1].update(counts=1)
    assert Rulings.model_validate(bad).reported == 2  # every row counts as reported (issue 59)
    bad["findings"][1].update(ruled_by="someone")
    with pytest.raises(ValueError, match="ruled_by"):
        Rulings.model_validate(bad)


# --- the finding's own evidence: each condition of `held up`, failing alone ---------------------

T01_TEXT = "POST /orders spans have no sqlite database child span: place_order in src/shop_api/app.py skips db.query"
T01_QUERY = ("`obs sql \"SELECT count(*) FROM spans s WHERE s.name = 'GET /products/{product_id}' AND EXISTS (SELECT 1 "
             "FROM spans c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\\\"db.system.name\\\"' = 'sqlite')\"` → 1")


def _one(run_dir: Path, text: str, evidence: str):
    head = REPORT.split("| 1 |")[0]
    claim = "[claim: missing-signal, absent, shop-api]"  # stated as `obs finding report` writes it
    (run_dir / "report.md").write_text(f"{head}| 1 | {text} {claim} | Telemetry | high | {evidence} |\n\n## Telemetry gaps\n")
    finding = draft_rulings(run_dir, KEY).finding("1")
    assert finding.defects == [label("T01-orders-bypass-db-span")]
    return finding


def test_own_evidence_that_re_runs_to_the_claim_holds_up(run_dir: Path):
    assert _one(run_dir, T01_TEXT, T01_QUERY).verdict == HELD_UP


ABSENT_QUERY = ("`obs sql \"SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c "
                "WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\\\"db.system.name\\\"' = 'sqlite')\"` → 0")


@pytest.mark.parametrize(("text", "evidence", "why"), [
    (T01_TEXT, "code reading", "no telemetry evidence cited"),
    (T01_TEXT, "none", "no telemetry evidence cited"),
    # The same query, claiming what it does not return.
    (T01_TEXT, T01_QUERY.replace("→ 1", "returned 12"), "returned 1 where the finding claims 12"),
    # The number is in the Finding's text, not after the query: compared all the same.
    (T01_TEXT.replace("span:", "span (40 spans checked):"), T01_QUERY.replace(" → 1", ""),
     "its text says 40, which no cited query re-ran to"),
    # A claimed absence (0), true on the store, shows nothing until a control store shows the thing present.
    (T01_TEXT, ABSENT_QUERY, "claims an absence"),
    # A query that holds, but reads another service's spans: not this defect's evidence.
    (T01_TEXT, "`obs traces search --service shop-mcp` → 1 span", "no cited query is evidence of the defect"),
    (T01_TEXT, "`obs sql \"SELECT 1\"` → 1", "reads no telemetry table"),
    (T01_TEXT, "`obs sql \"SELECT 1 FROM spans /* WHERE name = 'sqlite' */ LIMIT 1\"` → 1", "constant"),
    # A write, a bad command: refused, never run.
    (T01_TEXT, "`obs sql \"DELETE FROM spans WHERE name = 'POST /orders'\"`", "could not be re-run"),
    (T01_TEXT, "`obs traces get` on an order trace", "could not be re-run"),
    # Code the mission does not have, or not the defect's code (file AND function).
    (T01_TEXT.replace("src/shop_api/app.py", "src/shop_api/orders.py"), T01_QUERY,
     "src/shop_api/orders.py, which the mission's sources lack"),
    ("POST /orders spans have no sqlite database child span, db.query is skipped", T01_QUERY,
     "it does not accuse the defect's code"),
    (T01_TEXT.replace("place_order in src/shop_api/app.py", "get_product in src/shop_api/app.py"), T01_QUERY,
     "it does not accuse the defect's code"),
    (T01_TEXT.replace("src/shop_api/app.py", "src/shop_mcp/server.py"), T01_QUERY,
     "it does not accuse the defect's code"),
])
def test_own_evidence_failing_one_condition_does_not_hold_up(run_dir: Path, text, evidence, why):
    finding = _one(run_dir, text, evidence)
    assert finding.verdict == NOT_HELD_UP and why in finding.reason, finding.reason


def test_the_store_is_never_written(run_dir: Path):
    before = (run_dir / "telemetry.duckdb").read_bytes()
    _one(run_dir, T01_TEXT, "`obs sql \"DROP TABLE spans\"`; `SELECT count(*) FROM spans` → 4")
    with duckdb.connect(str(run_dir / "telemetry.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 4
    assert (run_dir / "telemetry.duckdb").read_bytes() == before


def test_accused_code_is_read_from_the_mission_not_the_run_workspace(run_dir: Path, tmp_path: Path):
    # The agent adds a file to its workspace and accuses it: the mission's sources decide.
    (run_dir / "workspace" / "src" / "shop_api").mkdir(parents=True)
    (run_dir / "workspace" / "src" / "shop_api" / "orders.py").write_text("def place_order():\n    pass\n")
    finding = _one(run_dir, T01_TEXT.replace("app.py", "orders.py"), T01_QUERY)
    assert finding.verdict == NOT_HELD_UP and "orders.py, which the mission's sources lack" in finding.reason


def _key_text() -> list[str]:
    """What the answer key says that a reason must never quote: each defect's queries (spacing
    folded), their expectations and its description."""
    said = []
    for d in yaml.safe_load(KEY.read_text())["defects"]:
        said.append(" ".join(d["description"].split()))
        for e in d["evidence"]:
            said += [" ".join(e["sql"].split()), f"{e['expect']} (got"]
    return said


def test_draft_reasons_never_quote_the_answer_key(tmp_path: Path):
    """Issue 63: a draft reason is one the agent may make final as it stands, so it describes the
    finding's own evidence and never quotes the hidden key: not its queries, not their expectations,
    not a defect's description, not its ids. The worst case: a report whose every row states a
    defect's description, its claim and its code, and cites the key's own queries word for word."""
    run = tmp_path / ".llms-benchmark" / "runs" / "20261130T010000Z-key-quoted"
    run.mkdir(parents=True)
    _store(run / "telemetry.duckdb")
    # A rejection logged under a span marked ERROR: the row's own count of rejections reads 1 while
    # the key's check of that defect (a rejection answered 200, its span not an error) does not hold.
    with duckdb.connect(str(run / "telemetry.duckdb")) as con:
        con.execute("INSERT INTO spans (trace_id, span_id, parent_span_id, service, name, kind, start_ns, end_ns, "
                    "duration_ms, status_code, attributes, resource, scope, events) VALUES ('t9', 's9', NULL, "
                    "'shop-api', 'POST /orders', 'SERVER', 0, 1, 1.0, 'ERROR', ?, '{}', 'test', '[]')",
                    [json.dumps({"http.response.status_code": "200"})])
        con.execute("INSERT INTO logs (time_ns, service, body, trace_id, span_id, attributes, resource, scope) "
                    "VALUES (1, 'shop-api', 'order rejected: unknown product', 't9', 's9', '{}', '{}', 'shop_api')")
    own = {"T02-rejections-answered-200":
           "SELECT count(*) FROM logs WHERE service = 'shop-api' AND body LIKE 'order rejected%'"}
    key = yaml.safe_load(KEY.read_text())["defects"]
    with duckdb.connect(str(run / "telemetry.duckdb"), read_only=True) as con:
        def read(sql: str) -> str:
            try:
                value = con.execute(sql).fetchone()[0]
            except duckdb.Error:
                return "an error"
            return "0" if value is None else str(value)

        rows = []
        for i, d in enumerate(key, 1):
            claim = d["claims"][0]
            direction = claim["direction"][0] if isinstance(claim["direction"], list) else claim["direction"]
            scope = claim["scope"][0] if isinstance(claim["scope"], list) else claim["scope"]
            where = f"{d['location']['file'].removeprefix('workspace/')} {d['location']['function'].split()[0]}"
            queries = [" ".join(e["sql"].split()) for e in d["evidence"]] + ([own[d["id"]]] if d["id"] in own else [])
            cited = "; ".join(f"`{q}` → {read(q)}" for q in queries)
            rows.append(f"| {i} | {' '.join(d['description'].split())} ({where}) "
                        f"[claim: {claim['kind']}, {direction}, {scope}] | {d['kind']} | high | {cited} |")
    head = REPORT.split("| 1 |")[0]
    (run / "report.md").write_text(head + "\n".join(rows) + "\n\n## Telemetry gaps\n")
    rulings = draft_rulings(run, KEY)
    assert len(rulings.findings) == len(key)
    reasons = {f.number: " ".join(f.reason.split()) for f in rulings.findings}
    quoted = [(n, said[:60]) for n, reason in reasons.items() for said in _key_text() if said in reason]
    assert quoted == [], quoted
    ids = [d["id"] for d in key] + [d["id"].split("-")[0] + ":" for d in key]
    assert not [(n, i) for n, reason in reasons.items() for i in ids if i in reason]
    # Both of the key's checks were among the reasons read: one that held up (T01), one that did not (T02).
    assert rulings.confirmed >= 1
    assert "2 of 2 of its readings as expected" in reasons["1"], reasons["1"]
    assert "0 of 1 of its readings as expected" in reasons["2"], reasons["2"]
