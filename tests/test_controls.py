"""Control stores (issue 20, item 1): each planted defect's fix, the stores made from them, and
rulings that credit a cited query only where it reads differently with the defect fixed.

The slow part drives the real stack: the mission's services and its scenario's short mode, for
the run's store and for the controls it needs (built into the machine's cache by `make setup`;
here only those missing are built)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from harness.errors import UserError
from harness.verdicts import controls as ctl
from harness.verdicts.keymatch import draft_rulings
from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP
from observed_drive import drive_showing_b01

ROOT = Path(__file__).resolve().parents[1]
MISSION = ROOT / "missions" / "observability"
KEY = MISSION / "key" / "defects.yaml"


def test_every_planted_defect_has_a_fix_that_applies(tmp_path: Path):
    fixes = ctl.load_fixes(MISSION)
    key = [d["id"] for d in yaml.safe_load(KEY.read_text())["defects"]]
    assert sorted(fixes) == sorted(key)
    for defect, edits in fixes.items():
        ws = tmp_path / defect
        shutil.copytree(MISSION / "workspace", ws, ignore=shutil.ignore_patterns("__pycache__"))
        before = {e.file: (ws / e.file).read_text() for e in edits}
        ctl.apply(ws, edits)
        for file, text in before.items():
            after = (ws / file).read_text()
            assert after != text, defect
            compile(after, file, "exec")  # the fixed source still parses


def test_a_fix_that_no_longer_matches_fails_loudly(tmp_path: Path):
    mission = tmp_path / "observability"
    shutil.copytree(MISSION, mission, ignore=shutil.ignore_patterns("__pycache__"))
    app = mission / "workspace" / "src" / "shop_mcp" / "server.py"
    app.write_text(app.read_text().replace('"qty": quantity', '"qty":quantity'))
    with pytest.raises(UserError, match="B03-quantity-key-mismatch finds its text 0 time"):
        ctl.load_fixes(mission)
    assert ctl.mission_hash(mission) != ctl.mission_hash(MISSION)  # a changed mission is a new set
    fixes = ctl.load_fixes(MISSION)
    edited = {**fixes, "T01-orders-bypass-db-span": fixes["T01-orders-bypass-db-span"][:1]}
    assert ctl.store_name("T01-orders-bypass-db-span", edited) != ctl.store_name("T01-orders-bypass-db-span", fixes)
    assert ctl.store_name("P03-stats-reads-whole-table", edited) == ctl.store_name("P03-stats-reads-whole-table", fixes)


NEEDED = [*ctl.BASELINES, "T01-orders-bypass-db-span", "T04-retired-http-attribute-names",
          "T06-mcp-call-logs-unexported", "P03-stats-reads-whole-table", "B01-order-ref-count-collision"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, ctl.Controls]:
    folder = ctl.build(MISSION, only=NEEDED)
    run = tmp_path_factory.mktemp("run") / "telemetry.duckdb"
    drive_showing_b01(run)  # the run's own store: the unfixed stack, driven once more (B01 showing)
    controls = ctl.Controls(folder, ctl.load_fixes(MISSION))
    yield run, controls
    controls.close()


@pytest.mark.timeout(900)
def test_each_fix_turns_its_key_evidence_off(stores):
    run, controls = stores
    for defect in NEEDED[2:]:
        (d,) = [d for d in yaml.safe_load(KEY.read_text())["defects"] if d["id"] == defect]
        with duckdb.connect(str(run), read_only=True) as con:
            on_run = [con.execute(e["sql"]).fetchone()[0] for e in d["evidence"]]
        fixed = [controls.connection(defect).execute(e["sql"]).fetchone()[0] for e in d["evidence"]]
        assert on_run != fixed, (defect, on_run, fixed)


def _rule(run_store: Path, tmp_path: Path, controls, text: str, evidence: str, kind: str = "Telemetry"):
    run = tmp_path / ".llms-benchmark" / "runs" / "r"
    run.mkdir(parents=True, exist_ok=True)
    (run / "report.md").write_text(
        "---\nservices: [shop-api]\nwindow: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z\nmode: drive\n---\n\n"
        "## Anomalies\n\n| # | Finding | Kind | Severity | Evidence |\n|---|---|---|---|---|\n"
        f"| 1 | {text} | {kind} | high | {evidence} |\n\n## Telemetry gaps\n")
    if not (run / "telemetry.duckdb").exists():
        os.symlink(run_store, run / "telemetry.duckdb")
    (f,) = finish(draft_rulings(run, KEY, controls=controls), None).findings
    return f


T01 = ("POST /orders spans never get a sqlite database child span: place_order in src/shop_api/app.py skips db.query "
       "[claim: missing-signal, absent, shop-api]")  # the claim stated as `obs finding report` writes it
ABSENT = ("`SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE "
          "c.parent_span_id = s.span_id AND c.attributes->>'$.\"db.system.name\"' = 'sqlite')` → 0")
CONTRAST = ("`SELECT count(*) FROM spans s WHERE s.name = 'GET /products/{product_id}' AND EXISTS (SELECT 1 FROM "
            "spans c WHERE c.parent_span_id = s.span_id AND c.attributes->>'$.\"db.system.name\"' = 'sqlite')`")


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("text", "evidence", "holds", "why"), [
    # The absence holds: with T01 fixed, POST /orders spans do get their sqlite child.
    (T01, ABSENT, True, "with that defect fixed"),
    # The contrast (GET /products has its child) reads the same fixed or not: not evidence of T01.
    (T01, CONTRAST, False, "does not read differently with the named defect fixed"),
    # T01's fix adds one span per order: a count of all shop-api spans must not become evidence.
    (T01, "`SELECT count(*) FROM spans WHERE service = 'shop-api'`", False, "read differently"),
    # Retired names: many on the run, none with the fix.
    ("shop-mcp's client spans carry the retired http.method: src/shop_mcp/api.py call "
     "[claim: wrong-signal, present, shop-mcp]",
     "`SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\"http.method\"' IS NOT NULL`",
     True, "with that defect fixed"),
    # ... while an absence of the opposite ('BREW') reads 0 on both.
    ("shop-mcp client spans carry no http.method at all: src/shop_mcp/api.py call [claim: wrong-signal, absent, shop-mcp]",
     "`SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\"http.method\"' = 'BREW'` → 0",
     False, "read differently"),
    # The unexported logger: 0 records on the run, its per-call lines with the fix.
    ("The shop_mcp.api logger never exports its lines (propagate=False in src/shop_mcp/api.py, call) "
     "[claim: missing-signal, absent, shop-mcp]",
     "`SELECT count(*) FROM logs WHERE scope = 'shop_mcp.api'` → 0", True, "with that defect fixed"),
    ("GET /stats reads every product row and aggregates in Python: src/shop_api/app.py: the stats handler "
     "[claim: over-fetch, higher, shop-api]",
     "`SELECT max(CAST(attributes->>'$.\"db.response.returned_rows\"' AS INTEGER)) FROM spans WHERE name LIKE "
     "'SELECT%' AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'GET /stats')` → 3000", True,
     "with that defect fixed"),
    # Colliding order refs: a few in every unfixed drive (the scenario's rushes), their number
    # noisy (1 or 2 or 3), none with the fix; the fix switches the thing off, whatever the spread.
    ("Concurrent orders get the same order_ref: place_order in src/shop_api/app.py computes it from COUNT(*) "
     "[claim: wrong-result, present, shop-api]",
     "`SELECT count(*) FROM (SELECT attributes->>'$.\"shop.order.ref\"' AS r FROM logs WHERE body = 'order placed' "
     "GROUP BY r HAVING count(*) > 1)`", True, "with that defect fixed"),
])
def test_a_cited_query_counts_only_where_it_discriminates(stores, tmp_path: Path, text, evidence, holds, why):
    run, controls = stores
    kind = "Perf" if "stats" in text else "Behavior" if "order_ref" in text else "Telemetry"
    f = _rule(run, tmp_path, controls, text, evidence, kind)
    assert (f.verdict == HELD_UP) is holds and why in f.reason, f.reason
