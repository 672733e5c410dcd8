"""Issue 34, item 4, end to end through the key-matcher: a hostile report (repeated numbers, an HTML
table, 1,200 rows, 16 KB cells, a findings.json that misses its schema) is drafted, saved and
loaded back against its own findings without an exception; what cannot be read is a named
problem of its finding, every row still counts as reported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from harness.telemetry.schema import create_all
from harness.verdicts.keymatch import MAX_RULED, draft_rulings, load_findings
from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP, load_rulings, save_rulings

ROOT = Path(__file__).resolve().parents[1]
KEY = ROOT / "missions" / "observability" / "key" / "defects.yaml"
FRONT = "---\nservices: [shop-api]\nwindow: 2026-12-03T01:00:00Z/2026-12-03T01:02:00Z\nmode: driven\n---\n"
TABLE = "## Anomalies\n\n| # | Finding | Kind | Severity | Evidence |\n|---|---|---|---|---|\n"
ROW = ("| {n} | POST /orders spans never get a sqlite child span: place_order in src/shop_api/app.py {pad}| Telemetry | "
       "high | `SELECT count(*) FROM spans WHERE name = 'POST /orders'` → 0 |")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / "telemetry.duckdb"
    with duckdb.connect(str(path)) as con:
        create_all(con)
    return path


def _rule(store: Path, folder: Path, report: str | None = None, records: str | None = None):
    folder.mkdir(parents=True)
    if report is not None:
        (folder / "report.md").write_text(report)
    if records is not None:
        (folder / "findings.json").write_text(records)
    os.symlink(store, folder / "telemetry.duckdb")
    rulings = finish(draft_rulings(folder, KEY), None)
    path = save_rulings(rulings, folder / "rulings.yaml")
    back = load_rulings(path, report=load_findings(folder, folder / "report.md"))
    assert back.findings == rulings.findings
    return back


@pytest.mark.parametrize("body", [
    TABLE + "\n".join(ROW.format(n=n, pad="") for n in (1, 1, 2, 1)),
    "# Report\n\n<table><tr><th>#</th><th>Finding</th><th>Kind</th><th>Severity</th><th>Evidence</th></tr>"
    "<tr><td>1</td><td>orders lack db spans in src/shop_api/app.py place_order</td><td>Telemetry</td><td>high</td>"
    "<td><code>SELECT 1</code></td></tr></table>",
    TABLE + ROW.format(n=1, pad="x" * 16_384 + " "),
    "```\n" + TABLE.split("\n\n", 1)[1] + ROW.format(n=1, pad="") + "\n```",
])
def test_hostile_layouts_are_ruled_never_raised(store: Path, tmp_path: Path, body: str):
    rulings = _rule(store, tmp_path / "r", FRONT + body + "\n\n## Telemetry gaps\n")
    assert rulings.findings and rulings.confirmed == 0
    assert len({f.number for f in rulings.findings}) == len(rulings.findings)


def test_a_thousand_rows_are_bounded_and_all_counted(store: Path, tmp_path: Path):
    rows = "\n".join(ROW.format(n=n, pad="") for n in range(1, 1201))
    rulings = _rule(store, tmp_path / "r", FRONT + TABLE + rows + "\n")
    assert len(rulings.findings) == 1000 and rulings.reported >= 1000 - MAX_RULED  # restatements count 0
    unread = [f for f in rulings.findings[MAX_RULED:]]
    assert all("not ruled on its evidence" in f.reason and f.counts == 1 for f in unread)
    assert not any(f.verdict == HELD_UP for f in rulings.findings)


def test_records_that_miss_the_schema_fall_back_or_fail_their_finding(store: Path, tmp_path: Path):
    good = {"number": "1", "claim": "POST /orders spans never get a sqlite child span", "kind": "Telemetry",
            "direction": "absent", "queries": [{"query": "SELECT count(*) FROM spans", "read": 0}],
            "code": {"file": "src/shop_api/app.py", "function": "place_order"}}
    bad = {**good, "number": "2", "claim": "shop-mcp client spans carry the retired http.method name",
           "direction": "sideways", "code": {"file": "src/shop_mcp/api.py"}}
    rulings = _rule(store, tmp_path / "a", records=json.dumps({"findings": [good, bad]}))
    assert [f.number for f in rulings.findings] == ["1", "2"]
    assert "findings schema" in rulings.findings[1].reason
    # Not JSON at all: the markdown report is ruled, the problem named on the way.
    rulings = _rule(store, tmp_path / "b", FRONT + TABLE + ROW.format(n=7, pad=""), records="{not json")
    assert [f.number for f in rulings.findings] == ["7"] and rulings.source == "report.md"
