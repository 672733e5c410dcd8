"""The report contract parser: findings numbered as the report numbers them, kinds,
evidence with pipes inside code, and partial reports parsed as far as they go."""

from __future__ import annotations

from harness.verdicts.report import parse_report

GOOD = """---
services: [shop-api, shop-mcp, shop-agent]
window: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z
mode: driven
---
# Observation report

## Anomalies

| # | Finding | Kind | Severity | Evidence |
|---|---------|------|----------|----------|
| 1 | `/search` scans the whole catalog | Perf | high | `obs sql "SELECT max(duration_ms) FROM spans WHERE name LIKE '%search%'"` → 812 ms |
| 2 | Orders answered 200 on failure | behaviour | high | `obs logs search --severity ERROR \\| head` → 14 errors, 0 error spans |
| 4 | Token metric has a constant label | Telemetry | medium | `obs metrics query gen_ai.client.token.usage --by gen_ai.request.model` → one series |

## Telemetry gaps

- shop-mcp exports no logs at all
- **G7:** the agent's spans use retired attribute names
  (`llm.usage.*` instead of `gen_ai.usage.*`)
"""


def test_findings_from_rows_and_bullets():
    report = parse_report(GOOD)
    assert report.problems == []
    assert report.window == ("2026-11-30T01:00:00Z", "2026-11-30T01:02:00Z")
    assert [f.number for f in report.findings] == ["1", "2", "4", "G1", "G7"]
    assert [f.kind for f in report.findings] == ["Perf", "Behavior", "Telemetry", "Telemetry", "Telemetry"]
    assert "LIKE '%search%'" in report.findings[0].evidence
    assert report.findings[1].evidence.startswith("`obs logs search --severity ERROR | head`")
    assert report.findings[4].text.endswith("(`llm.usage.*` instead of `gen_ai.usage.*`)")
    assert report.findings[4].section == "gaps"


def test_a_report_missing_the_contract_is_parsed_as_far_as_it_goes():
    text = "# notes\n\n## Anomalies\n\n| # | Finding | Kind |\n|---|---|---|\n| 1 | slow search | speed |\n"
    report = parse_report(text)
    assert [f.number for f in report.findings] == ["1"]
    assert report.findings[0].kind is None
    joined = " ".join(report.problems)
    assert "no front matter" in joined and "no Telemetry gaps section" in joined
    assert "kind 'speed'" in joined and "columns are" in joined


def test_empty_report():
    report = parse_report("")
    assert report.findings == [] and "no Anomalies section" in report.problems


def test_sub_findings_get_their_own_numbers_and_evidence():
    text = """---
services: [shop-api]
window: 2026-11-30T01:00:00Z/2026-11-30T01:02:00Z
mode: drive
---
## Anomalies
| # | Finding | Kind | Severity | Evidence |
|---|---|---|---|---|
| 8 | GET /stats is costly (src/shop_api/app.py stats): 8a) it reads all 3000 rows; 8b) it renders json.dumps | Perf | high | 8a: `SELECT 1` → 1; 8b: `SELECT 2` → 2 |
| 9 | mentions 9a) once only | Perf | high | x |
| 10 | (10a) first (10b) second | Perf | high | shared |
## Telemetry gaps
"""
    found = [(f.number, f.text, f.evidence) for f in parse_report(text).findings]
    assert found == [
        ("8a", "GET /stats is costly (src/shop_api/app.py stats): it reads all 3000 rows", "`SELECT 1` → 1"),
        ("8b", "GET /stats is costly (src/shop_api/app.py stats): it renders json.dumps", "`SELECT 2` → 2"),
        ("9", "mentions 9a) once only", "x"),
        ("10a", "first", "shared"), ("10b", "second", "shared")]
