"""Issue 48's acceptance, on real observability stores and the mission's real control stores, on
both drive shapes (10 s x 2 users, drive-matched; 120 s x 5 users, normalised): credit follows the
key's claims. Each finding is a record stating its claim in the closed fields (kind, direction,
scope); it is credited only where those match a claim the key states for a planted defect, its
code field accuses that defect's code and one cited query singles the defect out.

- HONEST: 45 records, three per planted defect in varied honest forms (FROM-first, `--` and
  `/* */` comments, CTEs, window functions, a target in the scope, either direction the key
  accepts): each set of 15 is one report, every finding counted, each once.
- FALSE: 44 records, each a report of its own (no restatement hides why it fails), in the
  issue's classes recast as fields (directions the key does not state for the defect, whatever
  the prose says; wrong kinds, scopes, targets; side effects of another defect under a dead
  literal; time filters; unscaled and LIMIT-capped counts; schema escapes; one observation for
  two defects) and our own (categories as kinds, prose naming the code the fields do not,
  enumerated kinds, constants): none held.

The stores come from tests/test_claim_adversarial.py's `run` fixture (the control stores are
built by `make setup` and kept in the machine's cache)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from harness.verdicts import timeshift
from harness.verdicts.key import label
from harness.verdicts.rulings import HELD_UP
from test_claim_adversarial import J, KEY, rule, run  # noqa: F401 - `run` is the stores' fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

API, MCP, AGENT = "src/shop_api/app.py", "src/shop_mcp/api.py", "src/shop_agent/model.py"
SERVER = "src/shop_mcp/server.py"

T01_WITH = ("SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE "
            f"c.parent_span_id = s.span_id AND c.{J.format('db.system.name')} = 'sqlite')")
T01_WITHOUT = ("-- POST /orders spans with no child at all\nFROM spans s SELECT count(*) WHERE s.name = 'POST /orders' "
               "AND NOT EXISTS (SELECT 1 FROM spans c WHERE c.parent_span_id = s.span_id)")
T02_REJECTED = ("SELECT count(*) FROM logs l JOIN spans s ON l.span_id = s.span_id WHERE l.body LIKE 'order rejected%' "
                f"AND s.{J.format('http.response.status_code')} = '200'")
T03_DISTINCT = f"SELECT count(DISTINCT {J.format('product.category')}) FROM metrics WHERE name = 'shop.orders.placed'"
T04_RETIRED = f"SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND {J.format('http.method')} IS NOT NULL"
T04_CURRENT = (f"FROM spans SELECT count(*) WHERE service = 'shop-mcp' AND kind = 'CLIENT' AND "
               f"{J.format('http.request.method')} IS NOT NULL")
T05_DURATION = "SELECT count(*) FROM metrics WHERE name = 'gen_ai.client.operation.duration'"
T06_LOGS = "SELECT count(*) FROM logs WHERE scope = 'shop_mcp.api'"
T07_OUTPUT = (f"SELECT max(sum) FROM metrics WHERE name = 'gen_ai.client.token.usage' AND "
              f"{J.format('gen_ai.token.type')} = 'output'")
P01_TLS = "SELECT sum(samples) FROM profiles WHERE service = 'shop-mcp' AND stack LIKE '%ssl:create_default_context%'"
P02_FANOUT = ("SELECT max(c) FROM (SELECT trace_id, count(*) AS c FROM spans WHERE name = 'GET /products/{product_id}' "
              "AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'tools/call search_products') GROUP BY trace_id)")
P03_ROWS = (f"SELECT max(CAST({J.format('db.response.returned_rows')} AS INTEGER)) FROM spans WHERE trace_id IN "
            "(SELECT trace_id FROM spans WHERE name = 'GET /stats')")
P04_DUMPS = "SELECT sum(samples) FROM profiles WHERE stack LIKE '%shop_api.app:stats;json:dumps%'"
P05_LOOP = ("SELECT sum(samples) FROM profiles WHERE service = 'shop-agent' AND stack LIKE '%asyncio.events:_run%' AND "
            "stack LIKE '%shop_agent.model:complete;httpx._client:post%'")
B01_SHARED = (f"SELECT count(*) FROM (SELECT {J.format('shop.order.ref')} AS r FROM logs WHERE body = 'order placed' "
              "GROUP BY r HAVING count(*) > 1)")
B02_REPEATS = (f"SELECT count(*) FROM (SELECT trace_id, {J.format('url.path')} AS p FROM spans WHERE service = 'shop-api' "
               f"AND {J.format('http.response.status_code')} = '404' GROUP BY 1, 2 HAVING count(*) >= 2)")
B03_ONE = (f"SELECT count(*) FROM spans WHERE name = 'POST /orders' AND {J.format('shop.order.quantity')} = '1' AND "
           f"trace_id IN (SELECT trace_id FROM spans WHERE name = 'execute_tool place_order' AND "
           f"{J.format('gen_ai.tool.call.arguments')} LIKE '%\"quantity\": 2%')")

# (defect, kind, direction, scope, file, function, claim, query)
HONEST = [
    # --- set 1: the plain forms ---
    [("T01-orders-bypass-db-span", "missing-signal", "absent", "shop-api", API, "place_order",
      "POST /orders spans get no sqlite child span", T01_WITH),
     ("T02-rejections-answered-200", "wrong-signal", "lower", "shop-api", API, "place_order",
      "rejected orders are answered 200 and their spans are never errors", T02_REJECTED),
     ("T03-constant-category-label", "wrong-signal", "lower", "shop-api:product.category", API, "place_order",
      "shop.orders.placed carries one product.category value, always general", T03_DISTINCT),
     ("T04-retired-http-attribute-names", "wrong-signal", "present", "shop-mcp:http.method", MCP, "call",
      "shop-mcp client spans carry the retired http.method", T04_RETIRED),
     ("T05-operation-duration-declared-unrecorded", "missing-signal", "absent", "shop-agent", AGENT, "complete",
      "gen_ai.client.operation.duration is declared and never recorded", T05_DURATION),
     ("T06-mcp-call-logs-unexported", "missing-signal", "absent", "shop-mcp", MCP, "call",
      "the shop_mcp.api logger's lines never reach the log store", T06_LOGS),
     ("T07-output-tokens-mislabelled", "wrong-signal", "higher", "shop-agent:gen_ai.client.token.usage", AGENT,
      "complete", "output token usage is recorded with the input count", T07_OUTPUT),
     ("P01-client-constructed-per-call", "redundant-work", "higher", "shop-mcp", MCP, "call",
      "a new httpx.AsyncClient and TLS context per call", P01_TLS),
     ("P02-search-detail-fanout", "redundant-work", "higher", "shop-mcp:search_products", SERVER, "search_products",
      "one GET /products/{id} per search hit", P02_FANOUT),
     ("P03-stats-reads-whole-table", "over-fetch", "higher", "shop-api:GET /stats", API, "stats",
      "GET /stats reads every product row", P03_ROWS),
     ("P04-stats-payload-rendered", "redundant-work", "higher", "shop-api:GET /stats", API, "stats",
      "GET /stats renders the catalog with json.dumps to log its size", P04_DUMPS),
     ("P05-sync-model-call-on-loop", "blocking", "present", "shop-agent", AGENT, "complete",
      "a synchronous model call blocks the event loop", P05_LOOP),
     ("B01-order-ref-count-collision", "wrong-result", "present", "shop-api:shop.order.ref", API, "place_order",
      "concurrent orders share one order_ref", B01_SHARED),
     ("B02-retries-on-client-errors", "retry-storm", "higher", "shop-mcp", MCP, "call",
      "a 404 is retried as if transient", B02_REPEATS),
     ("B03-quantity-key-mismatch", "wrong-result", "lower", "shop-mcp", SERVER, "place_order",
      "orders for two units arrive as one", B03_ONE)],
    # --- set 2: FROM-first, comments, CTEs; the other direction or scope the key accepts ---
    [("T01-orders-bypass-db-span", "missing-signal", "lower", "shop-api:POST /orders", API, "place_order",
      "POST /orders spans have no child span at all, so fewer db spans than a healthy system", T01_WITHOUT),
     ("T02-rejections-answered-200", "errors", "absent", "shop-api", API, "place_order",
      "order rejections never show as HTTP errors",
      f"/* rejections as errors */ FROM spans SELECT count(*) WHERE name = 'POST /orders' AND "
      f"CAST({J.format('http.response.status_code')} AS INTEGER) >= 400"),
     ("T03-constant-category-label", "wrong-signal", "lower", "shop-api", API, "place_order",
      "no order point carries a category other than general",
      f"-- the label never varies\nSELECT count(*) FROM metrics WHERE name = 'shop.orders.placed' AND "
      f"{J.format('product.category')} <> 'general'"),
     ("T04-retired-http-attribute-names", "wrong-signal", "absent", "shop-mcp:http.request.method", MCP, "call",
      "shop-mcp client spans lack the current http.request.method", T04_CURRENT),
     ("T05-operation-duration-declared-unrecorded", "missing-signal", "absent", "shop-agent:gen_ai.client.operation.duration",
      AGENT, "complete", "the GenAI duration histogram is missing",
      "-- declared, never recorded\nFROM metrics SELECT count(*) WHERE name LIKE 'gen_ai.client.operation%'"),
     ("T06-mcp-call-logs-unexported", "missing-signal", "lower", "shop-mcp:shop_mcp.api", MCP, "call",
      "shop-mcp's per-call log lines are missing",
      "FROM logs SELECT count(*) WHERE service = 'shop-mcp' AND scope LIKE 'shop_mcp.api%'"),
     ("T07-output-tokens-mislabelled", "wrong-signal", "higher", "shop-agent", AGENT, "complete",
      "metrics report more output tokens than the chat spans",
      f"WITH m AS (SELECT max(sum) AS v FROM metrics WHERE name = 'gen_ai.client.token.usage' AND "
      f"{J.format('gen_ai.token.type')} = 'output'), s AS (SELECT sum(CAST({J.format('gen_ai.usage.output_tokens')} "
      "AS BIGINT)) AS v FROM spans WHERE service = 'shop-agent' AND name LIKE 'chat %') SELECT m.v - s.v FROM m, s"),
     ("P01-client-constructed-per-call", "redundant-work", "present", "shop-mcp", MCP, "call",
      "every call constructs an httpx client",
      "FROM profiles SELECT sum(samples) WHERE service = 'shop-mcp' AND "
      "stack LIKE '%shop_mcp.api:call;httpx._client:__init__%'"),
     ("P02-search-detail-fanout", "redundant-work", "higher", "shop-api:GET /products/{product_id}", SERVER,
      "search_products", "detail fetches per search trace, by window",
      "SELECT max(n) FROM (SELECT count(*) OVER (PARTITION BY trace_id) AS n FROM spans WHERE "
      "name = 'GET /products/{product_id}' AND trace_id IN (SELECT trace_id FROM spans WHERE "
      "name = 'tools/call search_products'))"),
     ("P03-stats-reads-whole-table", "over-fetch", "higher", "shop-api", API, "stats",
      "the stats query returns the whole table",
      f"-- rows per stats read\nWITH st AS (SELECT trace_id FROM spans WHERE name = 'GET /stats') "
      f"SELECT max(CAST(s.{J.format('db.response.returned_rows')} AS INTEGER)) FROM spans s JOIN st USING (trace_id)"),
     ("P04-stats-payload-rendered", "redundant-work", "present", "shop-api", API, "stats",
      "json.dumps of the catalog on every stats call",
      "FROM profiles SELECT sum(samples) WHERE service = 'shop-api' AND stack LIKE '%shop_api.app:stats;json:dumps%'"),
     ("P05-sync-model-call-on-loop", "blocking", "higher", "shop-agent:POST /ask", AGENT, "complete",
      "the event loop waits on httpx.Client.post",
      "/* loop blocked */ FROM profiles SELECT sum(samples) WHERE service = 'shop-agent' AND "
      "stack LIKE '%asyncio.events:_run%shop_agent.model:complete;httpx._client:post%'"),
     ("B01-order-ref-count-collision", "wrong-result", "higher", "shop-api", API, "place_order",
      "more orders than distinct order references",
      f"-- duplicates\nSELECT count(*) - count(DISTINCT {J.format('shop.order.ref')}) FROM logs WHERE body = 'order placed'"),
     ("B02-retries-on-client-errors", "retry-storm", "present", "shop-api:GET /products/{product_id}", MCP, "call",
      "the same unknown product is asked for again after its 404",
      f"SELECT max(n) FROM (SELECT count(*) OVER (PARTITION BY trace_id, {J.format('url.path')}) AS n FROM spans "
      f"WHERE service = 'shop-api' AND {J.format('http.response.status_code')} = '404')"),
     ("B03-quantity-key-mismatch", "wrong-result", "lower", "shop-api:POST /orders", SERVER, "place_order",
      "the quantity asked for is lost on the way to the API",
      f"WITH asked AS (SELECT trace_id FROM spans WHERE name = 'execute_tool place_order' AND "
      f"{J.format('gen_ai.tool.call.arguments')} LIKE '%\"quantity\": 2%') FROM spans SELECT count(*) WHERE "
      f"name = 'POST /orders' AND {J.format('shop.order.quantity')} = '1' AND trace_id IN (SELECT trace_id FROM asked)")],
    # --- set 3: the plain queries again, stated with a line rather than a function, module level, obs sql ---
    [("T01-orders-bypass-db-span", "missing-signal", "absent", "shop-api", API, None,
      "order writes bypass db.query", f"-- trailing comment allowed\n{T01_WITH} -- 0 here"),
     ("T02-rejections-answered-200", "wrong-signal", "absent", "shop-api:http.response.status_code", API, "get_order",
      "unknown order refs answered 200", T02_REJECTED),
     ("T03-constant-category-label", "wrong-signal", "lower", "shop-api:shop.orders.placed", API, "place_order",
      "category label constant", f"FROM metrics SELECT approx_count_distinct({J.format('product.category')}) "
      "WHERE name = 'shop.orders.placed'"),
     ("T04-retired-http-attribute-names", "wrong-signal", "present", "shop-mcp", MCP, "call",
      "retired HTTP names", f"WITH c AS (SELECT * FROM spans WHERE service = 'shop-mcp' AND kind = 'CLIENT') "
      f"SELECT avg(CASE WHEN {J.format('http.url')} IS NOT NULL THEN 1 ELSE 0 END) FROM c"),
     ("T05-operation-duration-declared-unrecorded", "missing-signal", "absent", "shop-agent", AGENT, "operation_duration",
      "duration metric absent", f"obs sql \"{T05_DURATION}\""),
     ("T06-mcp-call-logs-unexported", "missing-signal", "absent", "shop-mcp", MCP, "call",
      "no shop_mcp.api records", f"/* logger */ {T06_LOGS}"),
     ("T07-output-tokens-mislabelled", "wrong-signal", "higher", "shop-agent:gen_ai.token.type", AGENT, "complete",
      "output tokens over-reported", f"-- output series\n{T07_OUTPUT}"),
     ("P01-client-constructed-per-call", "redundant-work", "higher", "shop-mcp:httpx.AsyncClient", MCP, "call",
      "TLS context built per attempt", f"/* tls */ {P01_TLS}"),
     ("P02-search-detail-fanout", "redundant-work", "higher", "shop-mcp", SERVER, "search_products",
      "search fans out", f"WITH t AS (SELECT trace_id FROM spans WHERE name = 'tools/call search_products') "
      "SELECT max(c) FROM (SELECT s.trace_id, count(*) AS c FROM spans s JOIN t USING (trace_id) "
      "WHERE s.name = 'GET /products/{product_id}' GROUP BY 1)"),
     ("P03-stats-reads-whole-table", "over-fetch", "higher", "shop-api:db.response.returned_rows", API, "stats",
      "whole table read", f"-- stats\n{P03_ROWS}"),
     ("P04-stats-payload-rendered", "redundant-work", "higher", "shop-api", API, "stats",
      "payload rendered to be measured", f"/* dumps */ {P04_DUMPS}"),
     ("P05-sync-model-call-on-loop", "blocking", "present", "shop-agent", AGENT, "complete",
      "sync call on the loop", f"-- loop\n{P05_LOOP}"),
     ("B01-order-ref-count-collision", "wrong-result", "present", "shop-api:order_ref", API, "place_order",
      "order refs collide", f"WITH refs AS (SELECT {J.format('shop.order.ref')} AS r FROM logs WHERE "
      "body = 'order placed') SELECT count(*) FROM (SELECT r FROM refs GROUP BY r HAVING count(*) > 1)"),
     ("B02-retries-on-client-errors", "retry-storm", "higher", "shop-api", MCP, "call",
      "404 answered several times a trace", f"/* repeats */ {B02_REPEATS}"),
     ("B03-quantity-key-mismatch", "wrong-result", "lower", "shop-mcp:place_order", SERVER, "place_order",
      "qty sent, quantity read", f"-- one unit\n{B03_ONE}")],
]


def reading(store: Path, query: str) -> float:
    """What the query reads on the store, as the agent saw it then (its `now()` during the run)."""
    from harness.verdicts.evidence import _ReadOnlyClient, open_store

    sql = query[len('obs sql "'):-1] if query.startswith("obs sql ") else query
    con = open_store(store)
    try:
        clock = timeshift.store_clock(con)
        rows = _ReadOnlyClient(con, rewrite=lambda s: timeshift.mapped(s, clock)).sql(sql).rows
    finally:
        con.close()
    if len(rows) != 1:
        return float(len(rows))
    value = rows[0][0]
    return 0.0 if value is None else float(value)


def record(store: Path, number: str, kind, direction, scope, file, function, claim, query, **extra) -> dict:
    code = {"file": file}
    if function:
        code["function"] = function
    else:
        text = (Path(__file__).resolve().parents[1] / "missions" / "observability" / "workspace" / file).read_text()
        code["line"] = next(i for i, line in enumerate(text.splitlines(), 1) if "def place_order" in line) + 2
    return {"number": number, "claim": claim, "kind": kind, "direction": direction, "scope": scope,
            "queries": [{"query": query, "read": reading(store, query)}], "code": code, **extra}


@pytest.mark.parametrize("which", [0, 1, 2])
def test_honest_records_are_each_counted_once(run, tmp_path: Path, which: int):
    store, drive = run
    rows = HONEST[which]
    records = [record(store, str(i), *row[1:]) for i, row in enumerate(rows, 1)]
    rulings = rule(store, drive, tmp_path, f"honest{which}", records={"findings": records})
    bad = [(f.number, rows[int(f.number) - 1][0], f.reason) for f in rulings.findings if f.verdict != HELD_UP]
    assert bad == [], bad
    assert [f.defects for f in rulings.findings] == [[label(row[0])] for row in rows]
    assert all(f.counts == 1 for f in rulings.findings) and rulings.confirmed == len(rows)


# --- false: (kind, direction, scope, file, function, claim, query) -----------------------------
FALSE = {
    # The classes recast as fields: the prose says anything, the field states a direction the
    # key does not state for the defect the query shows.
    "direction: T01 said present": ("missing-signal", "present", "shop-api", API, "place_order",
                                    "POST /orders spans carry their sqlite child", T01_WITH),
    "direction: T01 said higher (the query's direction)": ("missing-signal", "higher", "shop-api", API, "place_order",
                                                           "more childless POST /orders spans", T01_WITHOUT),
    "direction: T03 said higher": ("wrong-signal", "higher", "shop-api", API, "place_order",
                                   "more order points labelled general than a healthy system", T03_DISTINCT),
    "direction: T07 said lower": ("wrong-signal", "lower", "shop-agent", AGENT, "complete",
                                  "output tokens are not higher than the spans say: no more than them", T07_OUTPUT),
    "direction: P02 said lower": ("redundant-work", "lower", "shop-mcp", SERVER, "search_products",
                                  "search fetches fewer details than it should", P02_FANOUT),
    "negated: T06 said higher": ("missing-signal", "higher", "shop-mcp", MCP, "call",
                                 "shop-mcp logs are not lower than a healthy system's", T06_LOGS),
    "negated: B03 said higher": ("wrong-result", "higher", "shop-mcp", SERVER, "place_order",
                                 "orders are no smaller than asked", B03_ONE),
    "negated: P03 said lower": ("over-fetch", "lower", "shop-api", API, "stats",
                                "GET /stats does not read more rows than needed", P03_ROWS),
    "negated: B02 said lower": ("retry-storm", "lower", "shop-mcp", MCP, "call",
                                "404s are never retried more than once", B02_REPEATS),
    "negated: T04 said higher": ("wrong-signal", "higher", "shop-mcp", MCP, "call",
                                 "retired names are not absent", T04_RETIRED),
    "both words: T07 lower": ("wrong-signal", "lower", "shop-agent", AGENT, "complete",
                              "output usage is higher in metrics and lower in spans", T07_OUTPUT),
    "both words: P02 lower": ("redundant-work", "lower", "shop-mcp", SERVER, "search_products",
                              "fewer searches but more detail calls", P02_FANOUT),
    "both words: B01 lower": ("wrong-result", "lower", "shop-api", API, "place_order",
                              "fewer distinct refs, more orders", B01_SHARED),
    "verb: T07 under-reports": ("wrong-signal", "lower", "shop-agent", AGENT, "complete",
                                "the token metric under-reports output", T07_OUTPUT),
    "verb: T03 inflates": ("wrong-signal", "higher", "shop-api", API, "place_order",
                           "the category label inflates cardinality", T03_DISTINCT),
    "verb: P01 undercounts": ("redundant-work", "lower", "shop-mcp", MCP, "call",
                              "client construction undercounts", P01_TLS),
    "verb: B03 overstates": ("wrong-result", "higher", "shop-mcp", SERVER, "place_order",
                             "the order overstates the quantity", B03_ONE),
    # Wrong kind: the claim of the defect sharing the code, over this defect's query.
    # (Redundant work at stats is a reasonable statement of P03 as well since issue 59: P03's rows
    # under it are credited to P03. A kind neither accepts, over P03's query:)
    "kind: P03's query claimed as a blocking call": ("blocking", "present", "shop-api", API, "stats",
                                                     "GET /stats blocks the event loop", P03_ROWS),
    "kind: P01's query claimed as B02's": ("retry-storm", "higher", "shop-mcp", MCP, "call",
                                           "shop-mcp retries every failure", P01_TLS),
    # (Its target pins it to T06: without one, a missing signal of shop-mcp states T04 too since
    # issue 59, the current names being absent, which the retired names' count shows.)
    "kind: T04's query claimed as T06's": ("missing-signal", "absent", "shop-mcp:shop_mcp.api", MCP, "call",
                                           "shop-mcp's logs never arrive", T04_RETIRED),
    "kind: T01's query claimed as B01's": ("wrong-result", "present", "shop-api", API, "place_order",
                                           "order refs collide", T01_WITHOUT),
    "kind: T07's query claimed as P05's": ("blocking", "present", "shop-agent", AGENT, "complete",
                                           "the model call blocks the loop", T07_OUTPUT),
    # Wrong scope or target.
    "scope: T01 in shop-mcp": ("missing-signal", "absent", "shop-mcp", API, "place_order",
                               "POST /orders spans get no sqlite child", T01_WITH),
    "scope: P05 in shop-api": ("blocking", "present", "shop-api", AGENT, "complete", "the loop blocks", P05_LOOP),
    "target: T01 on GET /stats": ("missing-signal", "absent", "shop-api:GET /stats", API, "place_order",
                                  "stats spans get no db child", T01_WITH),
    # Another defect's side effect, with a dead literal naming the claimed defect.
    "side effect: T06 over shop-mcp error spans": (
        "missing-signal", "absent", "shop-mcp", MCP, "call", "the per-call log lines never arrive",
        "SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND status_code = 'ERROR' AND "
        "(scope = 'shop_mcp.api' OR scope <> 'shop_mcp.api')"),
    # (Redundant work at stats states P03 as well since issue 59, so P03's rows under it are P03's
    # evidence: tests/test_evidence_means.py holds that such a row is never credited as P04.)
    # Time filters the mapping once skipped: every store reads them alike, or all controls move alike.
    "time: the run's own start as a literal (the controls were driven before it)": (
        "redundant-work", "higher", "shop-api", API, "stats", "stats renders more",
        "SELECT count(*) FROM spans WHERE name = 'GET /stats' AND start_ns >= {RUN_START}"),
    "time: window over max time": (
        "redundant-work", "higher", "shop-api", API, "stats", "stats renders more",
        "SELECT count(*) FROM spans WHERE service = 'shop-api' AND start_ns > (SELECT max(start_ns) FROM spans) - 5e9"),
    "time: now() in a CTE": (
        "over-fetch", "higher", "shop-api", API, "stats", "stats reads more",
        "WITH w AS (SELECT epoch_ns(now() - INTERVAL 1 HOUR) AS t) SELECT count(*) FROM spans, w "
        "WHERE name = 'GET /stats' AND start_ns > w.t"),
    # Counts the syntax says do not scale, but grow with the drive.
    "unscaled: count(DISTINCT trace_id) of searches": (
        "redundant-work", "higher", "shop-mcp", SERVER, "search_products", "more detail fetches",
        "SELECT count(DISTINCT trace_id) FROM spans WHERE name = 'tools/call search_products'"),
    "unscaled: CTE count of traces with a 404": (
        "retry-storm", "higher", "shop-mcp", MCP, "call", "more 404s",
        f"WITH n AS (SELECT count(DISTINCT trace_id) AS c FROM spans WHERE service = 'shop-api' AND "
        f"{J.format('http.response.status_code')} = '404') SELECT max(c) FROM n"),
    "unscaled: max of a running count": (
        "wrong-result", "present", "shop-api", API, "place_order", "orders pile up",
        "SELECT max(n) FROM (SELECT row_number() OVER () AS n FROM logs WHERE body = 'order placed')"),
    "unscaled: LIMIT-capped count": (
        "over-fetch", "higher", "shop-api", API, "stats", "stats spans",
        "SELECT count(*) FROM (SELECT * FROM spans WHERE name = 'GET /stats' LIMIT 3)"),
    "unscaled: distinct traces of shop-agent": (
        "blocking", "present", "shop-agent", AGENT, "complete", "the loop blocks",
        "SELECT count(DISTINCT trace_id) FROM spans WHERE service = 'shop-agent'"),
    # Constants and absences that never move.
    "constant reading": ("missing-signal", "absent", "shop-agent", AGENT, "complete", "duration missing",
                         "SELECT 0 * count(*) FROM metrics"),
    "absence that reads 0 everywhere": ("wrong-signal", "absent", "shop-mcp", MCP, "call", "no BREW method",
                                        f"SELECT count(*) FROM spans WHERE {J.format('http.method')} = 'BREW'"),
    # Our own: the code field elsewhere (the prose names the right function), a category as kind.
    "code: prose names place_order, field accuses stats": (
        "missing-signal", "absent", "shop-api", API, "stats", "place_order in src/shop_api/app.py skips db.query",
        T01_WITH),
    "code: right function, wrong file": ("missing-signal", "absent", "shop-api", "src/shop_api/db.py", "query",
                                         "orders skip db.query", T01_WITH),
    "category as kind": ("Telemetry", "absent", "shop-api", API, "place_order", "orders skip db.query", T01_WITH),
    "kind is a phrase": ("missing-signal, absent", "absent", "shop-api", API, "place_order", "x x x x x", T01_WITH),
    "no scope": ("missing-signal", "absent", None, API, "place_order", "orders skip db.query", T01_WITH),
}


@pytest.mark.parametrize("case", list(FALSE))
def test_false_records_hold_nothing(run, tmp_path: Path, case: str):
    store, drive = run
    kind, direction, scope, file, function, claim, query = FALSE[case]
    if "{RUN_START}" in query:
        with duckdb.connect(str(store), read_only=True) as con:
            query = query.replace("{RUN_START}", str(con.execute("SELECT min(start_ns) FROM spans").fetchone()[0]))
    rec = record(store, "1", kind, direction, scope, file, function, claim, query)
    if scope is None:
        del rec["scope"]
    rulings = rule(store, drive, tmp_path, "false", records={"findings": [rec]})
    (f,) = rulings.findings
    assert f.verdict != HELD_UP and rulings.confirmed == 0, (case, f.reason)
    assert not any(t in f.reason for t in ("T0", "P0", "B0"))  # no key id


def test_one_observation_credits_one_defect(run, tmp_path: Path):
    store, drive = run
    # P04's samples move with P03's fix too; spelled three ways, they are one observation.
    spellings = [P04_DUMPS, f"-- again\n{P04_DUMPS.lower().replace('select sum', 'SELECT SUM')}",
                 f"FROM profiles SELECT sum(samples) AS s WHERE stack LIKE '%shop_api.app:stats;json:dumps%'"]
    records = [record(store, "1", "redundant-work", "higher", "shop-api", API, "stats", "payload rendered", spellings[0]),
               record(store, "2", "over-fetch", "higher", "shop-api", API, "stats", "whole table", spellings[1]),
               record(store, "3", "over-fetch", "higher", "shop-api", API, "stats", "whole table", spellings[2])]
    rulings = rule(store, drive, tmp_path, "once", records={"findings": records})
    held = [f.number for f in rulings.findings if f.verdict == HELD_UP]
    assert held == ["1"], [(f.number, f.reason) for f in rulings.findings]


def test_a_schema_escape_past_twenty_problems_holds_nothing(run, tmp_path: Path):
    store, drive = run
    broken = [{"number": f"x{i}", "claim": 5} for i in range(25)]
    sly = record(store, "late", "missing-signal", "absent", "shop-api", API, "place_order", "orders skip db.query",
                 T01_WITH)
    sly["code"]["file"] = [API]  # a list: not a file, and never a TypeError
    rulings = rule(store, drive, tmp_path, "escape", records={"findings": [*broken, sly]})
    assert rulings.confirmed == 0 and len(rulings.findings) == 26


def test_enumerated_kinds_credit_at_most_the_true_one(run, tmp_path: Path):
    store, drive = run
    from harness.telemetry.claims import load_vocabulary

    kinds = list(load_vocabulary(KEY.parents[1]).kinds)
    records = [record(store, str(i), kind, "absent", "shop-api", API, "place_order", "orders skip db.query", T01_WITH)
               for i, kind in enumerate(kinds, 1)]
    rulings = rule(store, drive, tmp_path, "enum", records={"findings": records})
    held = [(f.number, records[int(f.number) - 1]["kind"]) for f in rulings.findings if f.verdict == HELD_UP]
    assert held == [(str(kinds.index("missing-signal") + 1), "missing-signal")]
    # Every guess counts against its accuracy; `errors` names the defect `wrong-signal` named (T02
    # accepts both kinds), so it restates that guess ...
    restating = {f.number: f.restates for f in rulings.findings if f.restates}
    by_kind = {records[int(n) - 1]["kind"]: n for n in [f.number for f in rulings.findings]}
    # ... and that restatement is reported too (issue 59: every row a report makes counts).
    assert restating == {by_kind["errors"]: by_kind["wrong-signal"]} and rulings.reported == len(kinds)


def test_markdown_without_a_stated_claim_is_ambiguous(run, tmp_path: Path):
    store, drive = run
    from test_claim_adversarial import honest_a

    rulings = rule(store, drive, tmp_path, "md", honest_a(store).replace("[claim:", "[said:"))
    assert rulings.confirmed == 0 and all("ambiguous — state it as a record" in f.reason for f in rulings.findings)
