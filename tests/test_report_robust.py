"""Issue 34, item 4: whatever shape a hand-written report takes, the parser names the problem
and reads what it can; it never raises. Headings and columns are matched by meaning."""

from __future__ import annotations

import pytest

from harness.verdicts.report import CELL_CAP, MAX_FINDINGS, column_roles, parse_report

FRONT = "---\nservices: [shop-api]\nwindow: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z\nmode: driven\n---\n"
ROW = "| {n} | POST /orders spans lack a db child (src/shop_api/app.py place_order) | Telemetry | high | `SELECT 1` → 1 |"
TABLE = "| # | Finding | Kind | Severity | Evidence |\n|---|---|---|---|---|\n"


def test_a_repeated_number_is_ruled_apart_and_named():
    text = FRONT + "## Anomalies\n\n" + TABLE + "\n".join(ROW.format(n=n) for n in (1, 2, 2, 1, 2)) + \
        "\n\n## Telemetry gaps\n\n- one\n- G1: two\n"
    report = parse_report(text)
    assert [f.number for f in report.findings] == ["1", "2", "2-2", "1-2", "2-3", "G1", "G1-2"]
    assert any("appears more than once" in p for p in report.problems)


@pytest.mark.parametrize("heading", ["# Observation report", "## Issues found", "## Findings", "### anomalies!",
                                     "## Problems we saw"])
def test_odd_headings_and_a_title_above_the_table(heading):
    report = parse_report(FRONT + f"{heading}\n\n" + TABLE + ROW.format(n=1) + "\n")
    assert [f.number for f in report.findings] == ["1"], report.problems


def test_header_cells_are_matched_by_meaning():
    roles = column_roles(["No.", "Issue", "Type", "Impact", "Evidence (query → result)", "Root cause (code)"])
    assert roles == {"number": 0, "finding": 1, "kind": 2, "severity": 3, "evidence": 4, "code": 5}
    text = FRONT + "## Anomalies\n\n| No. | Issue | Type | Impact | Evidence (query → result) | Location |\n" \
        "|-|-|-|-|-|-|\n| 7 | orders lack db spans | Telemetry | high | `SELECT 1` → 1 | src/shop_api/app.py place_order |\n"
    (f,) = parse_report(text).findings
    assert (f.number, f.kind, f.evidence, f.code) == ("7", "Telemetry", "`SELECT 1` → 1", "src/shop_api/app.py place_order")


def test_fenced_and_html_tables_are_read_and_named():
    fenced = FRONT + "## Anomalies\n\n```\n" + TABLE + ROW.format(n=1) + "\n```\n"
    report = parse_report(fenced)
    assert [f.number for f in report.findings] == ["1"] and any("code fence" in p for p in report.problems)
    html = FRONT + "## Anomalies\n\n<table>\n<tr><th>#</th><th>Finding</th><th>Kind</th><th>Severity</th>" \
        "<th>Evidence</th></tr>\n\n<tr><td>3</td><td>orders lack db spans</td><td>Telemetry</td><td>high</td>" \
        "<td><code>SELECT count(*) FROM spans</code> → 4</td></tr>\n</table>\n"
    report = parse_report(html)
    (f,) = report.findings
    assert (f.number, f.evidence) == ("3", "`SELECT count(*) FROM spans` → 4")
    assert any("HTML table" in p for p in report.problems)


def test_a_thousand_rows_and_more_are_bounded():
    rows = "\n".join(ROW.format(n=n) for n in range(1, 1201))
    report = parse_report(FRONT + "## Anomalies\n\n" + TABLE + rows + "\n")
    assert len(report.findings) == MAX_FINDINGS
    assert any("1,200 findings" in p for p in report.problems)


def test_an_oversized_cell_is_a_named_problem_of_its_finding():
    big = "x" * 16_384
    report = parse_report(FRONT + "## Anomalies\n\n" + TABLE + f"| 1 | {big} | Perf | high | `SELECT 1` |\n")
    (f,) = report.findings
    assert len(f.text) == CELL_CAP and "16,384 characters" in f.problem


@pytest.mark.parametrize("text", [
    "", "---", "---\n: : :\n---\n", "|||\n|||", "| # |\n|-|\n| 1 |", "<table><tr><td>", "```\n| a |\n| b |",
    "## Anomalies\n\n| a | b |\n", "\x00\x01\ufeff", "#" * 5000, "|" * 20_000, "`" * 20_000,
    FRONT + "## Anomalies\n\n" + TABLE + "| **1** | x |\n| `2` |\n|\n",
    FRONT + "## Anomalies\n\n" + TABLE + "| 1 | 8a) x 8a) y | Perf | high | z |\n",
])
def test_nothing_raises(text):
    parse_report(text)  # what it reads does not matter here; that it returns does


def test_a_malformed_number_is_replaced_by_its_position():
    report = parse_report(FRONT + "## Anomalies\n\n" + TABLE + ROW.format(n="../../etc/passwd") + "\n")
    (f,) = report.findings
    assert f.number == "1" and any("not a short id" in p for p in report.problems)
