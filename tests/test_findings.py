"""Issue 34, item 1: findings as structured records. `obs finding add` writes findings.json against
its JSON schema and says at once what will not hold (a file or function the workspace lacks, a
query that fails or reads otherwise); the harness copies the file out without following links and
rules its records as fields, never mining text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from harness.telemetry import obs
from harness.telemetry import finding_record as fr
from harness.telemetry import obs_finding as of
from harness.telemetry.schema import create_all
from harness.verdicts import evidence as ev
from harness.telemetry.claims import ENV, load_vocabulary
from harness.verdicts.findings import FINDINGS_CAP, collect, report_from_records
from harness.verdicts.report import parse_report

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "missions" / "observability" / "workspace"
SQL = "SELECT count(*) FROM spans WHERE name = 'POST /orders'"
VOCAB = load_vocabulary(ROOT / "missions" / "observability")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(SOURCES / "src", ws / "src", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(ws)
    monkeypatch.setenv("OBS_URL", "http://127.0.0.1:9")  # no store: query checks say so, records still validate
    monkeypatch.setenv("OBS_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv(ENV, VOCAB.as_env())  # as the launch hands it to the agent
    return ws


def _add(*extra: str) -> int:
    args = ["--kind", "missing-signal", "--direction", "absent", "--scope", "shop-api:POST /orders"]
    for flag in ("--kind", "--direction", "--scope"):  # a test's own value replaces the default
        if flag in extra:
            i = args.index(flag)
            del args[i:i + 2]
    return obs.main(["finding", "add", "--claim", "POST /orders spans get no sqlite child span", *args,
                     "--query", SQL, "--read", "0", "--file", "src/shop_api/app.py", *extra])


def test_add_writes_a_record_the_schema_accepts(workspace: Path, capsys):
    assert _add("--function", "place_order") == 0
    assert _add("--module-level", "--gap") == 0
    data = json.loads((workspace / "findings.json").read_text())
    assert fr.schema_problems(data) == []
    assert [f["number"] for f in data["findings"]] == ["1", "G1"]
    assert data["findings"][0]["queries"] == [{"query": SQL, "read": 0}]
    out = capsys.readouterr().out
    assert "finding 1 added" in out and "fails" in out  # the store is unreachable here: said at once


@pytest.mark.parametrize(("extra", "why"), [
    ((), "name the function"),  # no function, line or module level
    (("--function", "no such"), "does not match"),
])
def test_add_refuses_what_the_schema_refuses(workspace: Path, capsys, extra, why):
    assert _add(*extra) == 1
    assert why in capsys.readouterr().err
    assert not (workspace / "findings.json").exists()


def test_check_names_missing_code_and_queries_that_read_otherwise(workspace: Path, tmp_path: Path):
    store = tmp_path / "t.duckdb"
    with duckdb.connect(str(store)) as con:
        create_all(con)
    data = {"findings": [
        {"number": "1", "claim": "orders lack their db span", "kind": "Telemetry", "direction": "absent",
         "queries": [{"query": SQL, "read": 12}, {"query": "SELECT count(*) FROM nowhere", "read": 0},
                     {"query": "obs traces search --name orders", "read": 0}],
         "code": {"file": "src/shop_api/app.py", "function": "handle_order_write"}},
        {"number": "2", "claim": "a file that is not there", "kind": "Perf", "direction": "higher",
         "queries": [{"query": SQL, "read": 0}], "code": {"file": "/etc/passwd", "line": 1}},
        {"number": "3", "claim": "reads nothing yet claims present", "kind": "Perf", "direction": "present",
         "queries": [{"query": SQL, "read": 0}], "code": {"file": "src/shop_api/app.py", "function": "stats"}},
    ]}
    con = ev.open_store(store)
    try:
        problems = of.check_all(data, workspace, ev._ReadOnlyClient(con), obs.parse_query)
    finally:
        con.close()
    text = "\n".join(problems)
    assert "handle_order_write: src/shop_api/app.py defines no such function" in text
    assert "reads 0" in text and "not the 12 recorded" in text
    assert "SELECT count(*) FROM nowhere` fails" in text
    assert "not under this workspace" in text
    assert "obs traces search" not in text  # it reads 0 rows, as recorded
    # The direction is the claim's, not the query's: a reading of 0 with `present` is no longer refused here.
    assert "finding 3" not in text


def test_the_harness_reads_records_as_fields(tmp_path: Path):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps({"findings": [
        {"number": "1", "claim": "POST /orders spans get no sqlite child span", "kind": "missing-signal",
         "direction": "absent", "scope": "shop-api", "queries": [{"query": SQL, "read": 0}],
         "code": {"file": "src/shop_api/app.py", "line": 150}},
        {"number": "2", "claim": "too short kind", "kind": "Speed", "direction": "up",
         "queries": [{"query": SQL, "read": 0}], "code": {"file": "src/shop_api/app.py", "function": "stats"}},
    ]}))
    report = report_from_records(path, SOURCES)
    one, two = report.findings
    assert (one.direction, one.queries, one.kind) == ("absent", [{"query": SQL, "read": 0}], "Telemetry")
    assert (one.claim_kind, one.scope) == ("missing-signal", "shop-api")  # the category follows the kind
    assert "src/shop_api/app.py" in one.code  # a line resolves to its function, or to module level
    assert two.problem and "findings schema" in two.problem and two.queries == []
    # Rendered to markdown, the same findings parse back (the report.md twin).
    data = json.loads(path.read_text())
    data["findings"] = data["findings"][:1]
    twin = parse_report(fr.render(data))
    assert [f.number for f in twin.findings] == ["1"] and SQL in twin.findings[0].evidence


def test_collect_never_follows_a_link_and_caps(tmp_path: Path):
    ws, run = tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    run.mkdir()
    assert collect(ws, run) is None
    secret = tmp_path / "secret.json"
    secret.write_text('{"findings": []}')
    os.symlink(secret, ws / "findings.json")
    refusals: list[str] = []
    assert collect(ws, run, refusals) is None and "symbolic link" in refusals[0]
    (ws / "findings.json").unlink()
    (ws / "findings.json").write_bytes(b" " * (FINDINGS_CAP + 1))
    refusals = []
    assert collect(ws, run, refusals) is None and "cap" in refusals[0]
    (ws / "findings.json").write_text('{"findings": []}')
    assert collect(ws, run) == run / "findings.json"


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe", b"[]", b'{"findings": 3}', b'{"findings": [1, "x", null]}',
                                 b'{"findings": [{"number": "../../x", "queries": [{"query": 5}]}]}'])
def test_hostile_records_are_named_never_raised(tmp_path: Path, raw: bytes):
    path = tmp_path / "findings.json"
    path.write_bytes(raw)
    report = report_from_records(path, SOURCES)
    assert all(f.problem or f.queries is not None for f in report.findings)
    assert report.problems or report.findings == []


@pytest.mark.parametrize(("extra", "field", "fix"), [
    (("--kind", "Telemetry"), "kind: 'Telemetry' (that is a category", "give --kind one of missing-signal"),
    (("--kind", "slowness"), "kind: 'slowness'", "give --kind one of"),
    (("--scope", "shop-web"), "scope: service 'shop-web' is not one of shop-api", "--scope SERVICE"),
    (("--scope", "shop-api:"), "scope: the target after ':' is empty", "--scope SERVICE:TARGET"),
])
def test_add_checks_the_closed_claim_fields_against_the_mission_vocabulary(workspace: Path, capsys, extra, field, fix):
    assert _add("--function", "place_order", *extra) == 1
    err = capsys.readouterr().err
    assert field in err and fix in err
    assert not (workspace / "findings.json").exists()


@pytest.mark.parametrize("file", ["../../../etc/passwd", "/etc/passwd", "src/../../../etc/passwd", "link.py"])
def test_add_refuses_an_accused_file_outside_the_workspace(workspace: Path, capsys, file):
    """Issue 63 item 5: the accused file is one of the workspace's, never a path out of it (a link
    inside it that leads out included); refused before findings.json is written."""
    (workspace / "link.py").symlink_to("/etc/passwd")
    assert _add("--line", "1", "--file", file) == 1
    err = capsys.readouterr().err
    assert f"code.file {file}: not under this workspace" in err and "give the path relative to it (src/...)" in err
    assert not (workspace / "findings.json").exists()


@pytest.mark.parametrize(("extra", "fix"), [
    (("--direction", "sideways"), "fix: give one of: higher, lower, absent, present"),
    (("--severity", "huge"), "fix: give one of: low, medium, high"),
    (("--line", "two"), "fix: see `obs finding add --help`"),
])
def test_an_option_obs_does_not_accept_is_refused_with_a_fix(workspace: Path, capsys, extra, fix):
    with pytest.raises(SystemExit) as exited:
        _add("--function", "place_order", *extra)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {extra[0]}:" in err and fix in err and "Traceback" not in err
    assert not (workspace / "findings.json").exists()


def test_add_without_the_vocabulary_says_where_it_comes_from(workspace: Path, capsys, monkeypatch):
    monkeypatch.delenv(ENV)
    assert _add("--function", "place_order") == 1
    assert "OBS_CLAIMS" in capsys.readouterr().err


def test_a_comment_or_from_first_query_is_sql(workspace: Path, tmp_path: Path):
    store = tmp_path / "t.duckdb"
    with duckdb.connect(str(store)) as con:
        create_all(con)
    con = ev.open_store(store)
    try:
        for query in ("-- orders\nSELECT count(*) FROM spans", "FROM spans SELECT count(*)",
                      "/* x */ WITH s AS (SELECT * FROM spans) SELECT count(*) FROM s"):
            assert of._query_problems(ev._ReadOnlyClient(con), query, 0, None, obs.parse_query) == [], query
    finally:
        con.close()


def test_the_report_states_the_claim_in_the_form_the_parser_reads_back(tmp_path: Path):
    from harness.verdicts.keymatch import load_findings

    record = {"number": "1", "claim": "POST /orders spans get no sqlite child span", "kind": "missing-signal",
              "direction": "absent", "scope": "shop-api:POST /orders", "queries": [{"query": SQL, "read": 0}],
              "code": {"file": "src/shop_api/app.py", "function": "place_order"}}
    (tmp_path / "report.md").write_text(fr.render({"findings": [record]}, vocab=VOCAB))
    row = load_findings(tmp_path, tmp_path / "report.md", SOURCES).findings[0]
    assert (row.claim_kind, row.direction, row.scope, row.kind) == ("missing-signal", "absent", "shop-api:POST /orders",
                                                                    "Telemetry")
