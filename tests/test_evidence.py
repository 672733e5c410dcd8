"""Reading a finding's Evidence cell: the queries it cites and the number it claims for each;
the SQL read with DuckDB's own parser; the re-run confined; the accused code by file and function."""

from __future__ import annotations

from pathlib import Path

import json
import threading
import time

import duckdb
import pytest

from harness.telemetry.schema import DDL
from harness.telemetry import sqlread
from harness.verdicts.accused import accused_code
from harness.verdicts.cited import Cited, cited_queries
from harness.verdicts.evidence import (
    literals_meet,
    literals_of,
    open_store,
    rerun,
    tables_of,
)

SOURCES = Path(__file__).resolve().parents[1] / "missions" / "observability" / "workspace"


def test_cited_queries_and_their_claims():
    cells = {
        "`obs sql \"SELECT count(*) FROM spans\"` → 12": [("obs sql \"SELECT count(*) FROM spans\"", 12)],
        "`SELECT 1` returned 0; `obs logs search --service shop-mcp` → no records":
            [("SELECT 1", 0), ("obs logs search --service shop-mcp", None)],
        "obs traces search --name stats --limit 5 → 5 spans, 4.7 s each":
            [("obs traces search --name stats --limit 5", 5)],
        "`obs profiles top --service shop-api | head` shows json:dumps at 40 % self": [
            ("obs profiles top --service shop-api", 40)],
        "code reading: src/shop_api/app.py place_order": [],
        "`{ name = \"POST /orders\" }` → 0 traces": [],  # TraceQL is not something obs runs
        "none": [],
    }
    for cell, expected in cells.items():
        assert [(c.text, c.claimed) for c in cited_queries(cell)] == expected, cell


def test_literals_name_what_a_query_looks_at():
    sql = ("SELECT count(*) FROM spans WHERE service = 'shop-api' AND kind = 'SERVER' AND "
           "json_extract_string(attributes, '$.\"http.response.status_code\"') = '404' AND name LIKE 'GET /prod%'")
    # Read off the parse tree: the service compared with `service` names no defect, nor do kinds/statuses.
    assert literals_of(sql) == {"http.response.status_code", "get /prod"}
    assert literals_meet({"get /products/{product_id}"}, {"get /prod"}) == {"get /prod"}
    assert literals_meet({"api"}, {"shop-api"}) == set()  # too short to count as inside


def test_accused_code_is_looked_up_in_the_sources():
    acc = accused_code("place_order in shop_api/app.py calls db.query(); see stats() and `search_products`", SOURCES)
    assert acc.files == {"src/shop_api/app.py"}
    assert {"place_order", "stats", "search_products"} <= acc.functions and acc.missing == []
    assert acc.in_file == {"src/shop_api/app.py": {"place_order", "stats"}}  # search_products is shop_mcp's
    acc = accused_code("the bug is in src/shop_api/billing.py: charge() and app.py:no_such_function", SOURCES)
    # A bare `charge()` is no longer "missing" (issue 34: `create_default_context()` is a library's);
    # a file the sources lack, and `file.py:name` for a name that file lacks, still are.
    assert sorted(acc.missing) == sorted(["src/shop_api/billing.py", "no_such_function() in app.py"])


@pytest.mark.parametrize(("text", "file", "functions", "accuses"), [
    # "file: the X handler" names X in that file (it was read as accusing `the()`).
    ("GET /stats is slow: src/shop_api/app.py: the stats handler reads every row", "src/shop_api/app.py",
     {"stats"}, True),
    ("src/shop_api/app.py (stats) renders the catalog", "src/shop_api/app.py", {"stats"}, True),
    ("the stats route of src/shop_api/app.py", "src/shop_api/app.py", {"stats"}, True),
    # File AND function: the right file with the wrong function ...
    ("src/shop_api/app.py get_product reads every row", "src/shop_api/app.py", {"stats"}, False),
    # ... a function of that name in another file ...
    ("place_order in src/shop_mcp/server.py opens a raw connection", "src/shop_api/app.py", {"place_order"}, False),
    # ... the function with no file at all ...
    ("place_order opens a raw connection", "src/shop_api/app.py", {"place_order"}, False),
    # ... or a function the file does not have, written without parentheses.
    ("src/shop_api/app.py handle_order_write opens a raw connection", "src/shop_api/app.py", {"place_order"}, False),
    # SQL's functions and tables accuse nothing: `now()` in a cited query, `count(*)`.
    ("`SELECT count(*) FROM spans WHERE start_ns > epoch_ns(now())` → 3; place_order in src/shop_api/app.py",
     "src/shop_api/app.py", {"place_order"}, True),
    # Issue 34's honest wordings: a module-level name, the function before its file, `./` and
    # absolute paths, a library's path and call beside the mission's code.
    ("model.py: operation_duration is declared at module level but never recorded (src/shop_agent/model.py)",
     "src/shop_agent/model.py", {"operation_duration"}, True),
    ("complete in src/shop_agent/model.py records the input count as output", "src/shop_agent/model.py",
     {"complete"}, True),
    ("./src/shop_mcp/api.py: call() builds a client per attempt", "src/shop_mcp/api.py", {"call"}, True),
    ("/tmp/run-1/workspace/src/shop_mcp/api.py: call() builds a client", "src/shop_mcp/api.py", {"call"}, True),
    ("call() in src/shop_mcp/api.py spends its time in ssl's create_default_context() "
     "(/usr/lib/python3.12/ssl.py, .venv/lib/python3.12/site-packages/httpx/_client.py)",
     "src/shop_mcp/api.py", {"call"}, True),
    # A library call is not the mission's function: httpx.AsyncClient() names nothing missing.
    ("a new httpx.AsyncClient() per API call in call() (src/shop_mcp/api.py)", "src/shop_mcp/api.py", {"call"}, True),
])
def test_the_accused_code_is_the_file_and_its_function(text, file, functions, accuses):
    acc = accused_code(text, SOURCES)
    assert acc.accuses(file, functions) is accuses, (acc.in_file, acc.missing)
    assert "now()" not in acc.missing and "the()" not in acc.missing and "AsyncClient()" not in acc.missing
    assert not any("/" in m and m.startswith("/") for m in acc.missing)  # never a host path
    if accuses:
        assert acc.missing == [], acc.missing


def test_the_parser_reads_tables_and_literals_never_comments():
    shape = sqlread.parse("SELECT 40 /* FROM spans WHERE name = 'POST /orders' */")
    assert shape.error is None and shape.tables == set() and shape.literals == set()
    assert sqlread.not_a_measurement(shape) and "no telemetry table" in sqlread.not_a_measurement(shape)
    # A comment naming a table or a literal adds neither; `--` comments too.
    sql = "SELECT count(*) FROM spans /* JOIN metrics 'sqlite' */ WHERE service = 'shop-api' -- AND name = 'x'"
    assert tables_of(sql) == {"spans"} and literals_of(sql) == set()
    # CTE names are not tables; a query on a CTE over logs reads logs.
    assert tables_of("WITH spans AS (SELECT * FROM logs) SELECT count(*) FROM spans") == {"logs"}
    # A constant select list is no measurement, even over a real table; a count is.
    assert "constant" in sqlread.not_a_measurement(sqlread.parse("SELECT 12 FROM spans WHERE service = 'x' LIMIT 1"))
    assert "constant" in sqlread.not_a_measurement(sqlread.parse("SELECT 12 FROM (SELECT count(*) FROM spans)"))
    assert sqlread.not_a_measurement(sqlread.parse("SELECT max(c) FROM (SELECT count(*) AS c FROM spans)")) is None
    assert sqlread.parse("SELECT 7 + 0 * count(*) FROM spans").select_numbers == {7.0, 0.0}
    # A string that only looks like SQL inside a literal is a literal.
    assert tables_of("SELECT count(*) FROM logs WHERE body = 'x FROM spans JOIN metrics'") == {"logs"}


@pytest.mark.parametrize(("sql", "why"), [
    ("SELECT * FROM read_text('/etc/passwd')", "table function read_text"),
    ("SELECT count(*) FROM glob('/etc/*')", "table function glob"),
    ("SELECT count(*) FROM 'http://127.0.0.1:9/x.parquet'", "not one of the store's tables"),
    ("SELECT * FROM '/etc/passwd'", "not one of the store's tables"),
    ("SELECT count(*) FROM range(100000000000)", "table function range"),
    ("SELECT * FROM duckdb_settings()", "table function duckdb_settings"),
    ("SELECT current_setting('home_directory') FROM spans", "current_setting()"),
    ("DELETE FROM spans", "not one SELECT"),
    ("SELECT 1; SELECT 2", "not one SELECT"),
    ("SELEC count(*) FROM spans", "not one SELECT"),
])
def test_refused_before_it_runs(sql, why):
    assert why in (sqlread.refusal(sqlread.parse(sql)) or ""), sqlread.refusal(sqlread.parse(sql))


def test_obs_built_queries_are_not_refused():
    from harness.telemetry import obs

    class Spy:
        def __init__(self):
            self.sql = []

        def __call__(self, sql, limit=0):
            self.sql.append(sql)
            raise obs.QueryFailed("spy")

    for argv in (["traces", "search", "--service", "shop-api", "--name", "GET /stats"], ["profiles", "top"],
                 ["logs", "search", "--text", "order"], ["metrics", "query", "shop.orders.placed", "--by", "x"],
                 ["metrics", "list"]):
        args = obs.build_parser().parse_args(argv)
        spy = Spy()
        client = type("C", (), {"sql": staticmethod(spy)})()
        with pytest.raises(obs.QueryFailed):
            args.func(client, args)
        for sql in spy.sql:
            shape = sqlread.parse(sql)
            assert sqlread.refusal(shape) is None and shape.signal_tables, (argv, sql)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "telemetry.duckdb"
    con = duckdb.connect(str(path))
    for sql in DDL.values():
        con.execute(sql)
    for i in range(400):
        con.execute("INSERT INTO spans (trace_id, span_id, service, name, kind, start_ns, end_ns, duration_ms, "
                    "status_code, attributes, resource, scope, events) VALUES (?, ?, 'shop-api', 'GET /stats', "
                    "'SERVER', 0, 1, 1.0, 'UNSET', ?, '{}', 't', '[]')", [f"t{i}", f"s{i}", json.dumps({"n": i})])
    con.close()
    return path


def test_the_re_run_is_confined(store, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TOPSECRET\n")
    con = open_store(store)
    try:
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        # Even past the parser's refusal, the connection itself reads no file.
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"SELECT * FROM read_text('{secret}')").fetchall()
        for sql in (f"SELECT * FROM read_text('{secret}')", f"SELECT count(*) FROM glob('{tmp_path}/*')",
                    f"SELECT * FROM '{secret}'"):
            check = rerun(con, Cited(sql, 1), hide=(str(tmp_path),))
            assert not check.ok and not check.evidence and "TOPSECRET" not in str(check.result) + check.why
        # A query running past its limit is interrupted, and is not evidence.
        t0 = time.monotonic()
        check = rerun(con, Cited("SELECT count(*) FROM spans a, spans b, spans c, spans d WHERE a.name || b.name "
                                 "LIKE '%' || c.name || d.name", 5), limit_s=1.0)
        assert time.monotonic() - t0 < 5 and not check.ok and "ran over 1 s" in check.why
        # The row cap: a listing is fetched up to ROW_CAP rows, never all of a huge result.
        check = rerun(con, Cited("SELECT * FROM spans", 400))
        assert check.ok and check.result == "400 rows"
    finally:
        con.close()
    assert threading.active_count() < 50  # the interrupt timers are cancelled, not leaked


@pytest.mark.parametrize(("sql", "claimed", "evidence", "why"), [
    ("SELECT count(*) FROM spans WHERE name = 'GET /stats'", 400, True, ""),
    ("SELECT count(*) FROM spans WHERE name = 'GET /stats'", 12, False, "returned 400 where the finding claims 12"),
    ("SELECT count(*) FROM spans WHERE name = 'nothing'", 0, False, "absence"),
    ("SELECT 40", 40, False, "no telemetry table"),
    ("SELECT 12 FROM spans LIMIT 1", 12, False, "constant"),
    # Issue 48: a literal never turns a check off: it re-runs as a measurement, flagged `constant_claim`,
    # which the controls (a constant never moves) or `reads_defect` (without them) then refuse.
    ("SELECT 7 + 0 * count(*) FROM spans", 7, True, ""),
    ("-- the stats calls\nSELECT count(*) FROM spans WHERE name = 'GET /stats'", 400, True, ""),
    ("FROM spans SELECT count(*) WHERE name = 'GET /stats'", 400, True, ""),
    ("SELECT count(*) FROM spans /* WHERE name = 'x' */", None, True, ""),
])
def test_what_re_runs_to_its_claim_and_what_is_evidence(store, sql, claimed, evidence, why):
    con = open_store(store)
    try:
        check = rerun(con, Cited(sql, claimed))
    finally:
        con.close()
    assert check.evidence is evidence, (check.result, check.why, check.not_evidence)
    assert why in (check.why + check.not_evidence)


@pytest.mark.parametrize(("sql", "claimed", "constant"), [
    ("SELECT 7 + 0 * count(*) FROM spans", 7, True),
    ("SELECT round(count(*) / 100.0, 0) FROM spans WHERE name = 'GET /stats'", 4, False),
    ("SELECT count(*) FROM spans WHERE name = 'GET /stats'", 400, False),
])
def test_a_reading_equal_to_a_select_list_number_is_flagged_not_refused(store, sql, claimed, constant):
    con = open_store(store)
    try:
        check = rerun(con, Cited(sql, claimed))
    finally:
        con.close()
    assert check.evidence and check.constant_claim is constant
