"""Issue 48, item 5: the rule is bounded on any input. findings.json is capped in bytes and
objects before it is parsed; schema problems are counted, not all built; each record is read
field by field, so a malformed one never raises nor takes another down; the rule's process has
its memory capped (an rlimit), so a query that builds gigabytes of string ends in a recorded
Out of Memory, not a killed process. (Speed is measured in bench/rule_timing.py, not here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from harness.telemetry.finding_record import SHOWN_PROBLEMS, schema_problems
from harness.telemetry.schema import create_all
from harness.verdicts.findings import FINDINGS_CAP, OBJECTS_CAP, report_from_records

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "missions" / "observability" / "workspace"
GOOD = {"number": "1", "claim": "POST /orders spans never get a sqlite child span", "kind": "missing-signal",
        "direction": "absent", "scope": "shop-api", "queries": [{"query": "SELECT count(*) FROM spans", "read": 0}],
        "code": {"file": "src/shop_api/app.py", "function": "place_order"}}


def _records(tmp_path: Path, data) -> Path:
    path = tmp_path / "findings.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_150k_empty_records_are_refused_before_parsing(tmp_path: Path):
    path = _records(tmp_path, '{"findings": [' + ",".join(["{}"] * 150_000) + "]}")
    assert path.stat().st_size < FINDINGS_CAP
    report = report_from_records(path, SOURCES)
    assert report.findings == [] and f"over {OBJECTS_CAP:,} JSON objects" in report.problems[0]


def test_schema_problems_are_counted_not_all_built(tmp_path: Path):
    data = {"findings": [{"number": str(i), "claim": 5} for i in range(5000)]}
    problems = schema_problems(data)
    assert len(problems) == SHOWN_PROBLEMS + 1
    assert "5,000 records; at most 200 are read" in problems[0]
    assert problems[-1].startswith("findings.json: and ") and "more problem(s)" in problems[-1]


def test_deep_nesting_is_a_named_problem(tmp_path: Path):
    path = _records(tmp_path, '{"findings": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    report = report_from_records(path, SOURCES)
    assert report.findings == [] and "not JSON" in report.problems[0]


@pytest.mark.parametrize("bad_code", [{"file": ["src/shop_api/app.py"], "function": "place_order"},
                                      {"file": {"x": 1}, "line": "12"}, {"file": "src/../../etc/passwd", "line": 3},
                                      ["src/shop_api/app.py"], {"file": "src/shop_api/app.py", "line": True}])
def test_a_malformed_record_fails_alone(tmp_path: Path, bad_code):
    # The broken record repeats the good one's number and sits before it: the good one still reads whole.
    bad = {**GOOD, "code": bad_code, "kind": ["missing-signal"], "scope": 7}
    report = report_from_records(_records(tmp_path, {"findings": [bad, GOOD]}), SOURCES)
    broken, good = report.findings
    assert broken.problem and "kind" in broken.problem and broken.claim_kind is None
    assert good.problem is None and good.claim_kind == "missing-signal" and good.queries == GOOD["queries"]
    assert "src/shop_api/app.py place_order" in good.code


def test_the_rule_process_memory_is_capped(tmp_path: Path):
    store = tmp_path / "t.duckdb"
    with duckdb.connect(str(store)) as con:
        create_all(con)
        con.execute("INSERT INTO spans (trace_id, span_id, service, name) SELECT 't' || i, 's' || i, 'shop-api', 'x' "
                    "FROM range(2000) t(i)")
    script = f"""
import resource, sys
sys.path.insert(0, {str(ROOT)!r})
from harness.verdicts.bounds import cap_memory
from harness.verdicts import cited as ci
from harness.verdicts import evidence as ev
cap = cap_memory(1 << 30)
con = ev.open_store(__import__("pathlib").Path({str(store)!r}))
check = ev.rerun(con, ci.Cited("SELECT length(string_agg(repeat(name, 3000000), '')) FROM spans", None))
print(cap, check.ok, check.result)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, rss = done.stdout.splitlines()
    assert first.startswith(str(1 << 30) + " False error:") and "Out of Memory" in first
    assert int(rss) < 1200  # MB: the 6 GB string was never built


def test_the_rules_memory_cap_ends_with_the_rule(tmp_path):
    """The cap bounds the rule's work only: a process that calls the CLI in-process and goes on
    (a test runner, a notebook) starts its later children with its own limit again. Kept, a 1 GiB
    data limit made every opencode (Bun) and llama-server started afterwards die at start."""
    script = f"""
import os, resource, subprocess, sys
sys.path.insert(0, {str(ROOT)!r})
from typer.testing import CliRunner
from harness.cli import app
from harness.verdicts.bounds import memory_capped
before = resource.getrlimit(resource.RLIMIT_DATA)
with memory_capped(1 << 30) as cap:
    inside = resource.getrlimit(resource.RLIMIT_DATA)
os.chdir({str(tmp_path)!r})
result = CliRunner().invoke(app, ["rule", "no-such-run", "--accept"], catch_exceptions=False)
child = subprocess.run([sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_DATA)[0])"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(before[0], cap, inside[0], result.exit_code, resource.getrlimit(resource.RLIMIT_DATA)[0], child)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LLMS_BENCHMARK_ROOT": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    before, cap, inside, code, after, child = done.stdout.split()
    assert int(cap) >= 1 << 30 and inside == cap, done.stdout  # the cap held while the rule ran
    assert code == "2", done.stdout  # no such run: refused, as a user error
    assert after == before and child == before, done.stdout
