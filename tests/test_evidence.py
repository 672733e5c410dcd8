"""Reading a finding's Evidence cell: the queries it cites and the number it claims for each."""

from __future__ import annotations

from pathlib import Path

from harness.verdicts.evidence import accused_code, cited_queries, literals_meet, literals_of

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
    assert literals_of(sql) == {"shop-api", "http.response.status_code", "get /prod"}
    assert literals_meet({"get /products/{product_id}"}, {"get /prod"}) == {"get /prod"}
    assert literals_meet({"api"}, {"shop-api"}) == set()  # too short to count as inside


def test_accused_code_is_looked_up_in_the_sources():
    acc = accused_code("place_order in shop_api/app.py calls db.query(); see stats() and `search_products`", SOURCES)
    assert acc.files == {"src/shop_api/app.py"}
    assert {"place_order", "stats", "search_products"} <= acc.functions and acc.missing == []
    acc = accused_code("the bug is in src/shop_api/billing.py: charge() and app.py:no_such_function", SOURCES)
    assert acc.missing == ["src/shop_api/billing.py", "charge()", "no_such_function()"] or \
        sorted(acc.missing) == sorted(["src/shop_api/billing.py", "charge()", "no_such_function()"])
