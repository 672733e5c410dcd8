"""Issue 34's acceptance, on real observability stores and the mission's real control stores:
credit follows the claim. Over 20 false findings (each a report of its own, so no restatement
hides why it fails) hold 0; over 20 honest findings in varied wording (a report in the contract's
layout, one in an odd layout, and the structured twin of the first) are all counted, each once.

Two runs: a short drive (10 s × 2 users, as the controls were driven: "drive-matched") and the
prompt's default `obs drive` (120 s × 5 users: compared per request driven, "normalised"). The
long store takes ~3 minutes to drive, so it is kept in the machine's cache beside the control
stores, keyed by the mission's hash (a changed mission drives a new one)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import duckdb
import pytest

from harness.verdicts import controls as ctl
from harness.verdicts.key import label
from harness.verdicts.keymatch import draft_rulings
from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP
from observed_drive import cached_store

ROOT = Path(__file__).resolve().parents[1]
MISSION = ROOT / "missions" / "observability"
KEY = MISSION / "key" / "defects.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

DRIVES = {"short": {"duration": 10, "vus": 2}, "default": {"duration": 120, "vus": 5}}


@pytest.fixture(scope="module", params=list(DRIVES))
def run(request):
    """(store, drive): the mission's stack driven by the harness's drive, as a launch does; one
    store per drive shape on this machine, shared by every module (`observed_drive.cached_store`)."""
    drive = DRIVES[request.param]
    ctl.build(MISSION)  # the control stores (made by `make setup`; built here when missing)
    return cached_store(drive), drive


def as_read(text: str, store: Path) -> str:
    """An honest report quotes what its store reads: `{{SQL}}` becomes "`SQL` → N" (N the first cell),
    `{{SQL|2}}` quotes the second cell."""
    from harness.verdicts import timeshift

    with duckdb.connect(str(store), read_only=True) as con:
        clock = timeshift.store_clock(con)  # `now()` as the agent saw it: during its run, not today

        def fill(m):
            sql, col = m.group(1), int(m.group(2) or 1) - 1
            row = con.execute(timeshift.mapped(sql, clock)).fetchone()
            value = 0 if row is None or row[col] is None else row[col]
            return f"`{sql}` → {int(value) if float(value).is_integer() else round(float(value), 3)}"

        return re.sub(r"\{\{(.+?)(?:\|(\d))?\}\}", fill, text)


def rule(store: Path, drive: dict, tmp: Path, name: str, report: str | None = None, records: dict | None = None):
    folder = tmp / name
    folder.mkdir(parents=True)
    if report is not None:
        (folder / "report.md").write_text(report)
    if records is not None:
        (folder / "findings.json").write_text(json.dumps(records))
    os.symlink(store, folder / "telemetry.duckdb")
    # The harness's own record of the drive it ran for the agent (the agent cannot write the run folder).
    (folder / "harness-drive-1.json").write_text(json.dumps({"duration_s": drive["duration"], "vus": drive["vus"]}))
    return finish(draft_rulings(folder, KEY, controls=ctl.Controls.for_mission(MISSION)), None)


HEAD = ("---\nservices: [shop-api, shop-mcp, shop-agent]\nwindow: 2026-12-03T01:00:00Z/2026-12-03T01:02:00Z\n"
        "mode: driven\n---\n\n## Anomalies\n\n| # | Finding | Kind | Severity | Evidence |\n|---|---|---|---|---|\n")

J = "attributes->>'$.\"{}\"'"  # a JSON attribute, as agents write it

# The claim each honest finding states (issue 48), as `obs finding report` writes it into a row.
CLAIMS = {
    "T01-orders-bypass-db-span": ("missing-signal", "absent", "shop-api"),
    "T02-rejections-answered-200": ("wrong-signal", "lower", "shop-api"),
    "T03-constant-category-label": ("wrong-signal", "lower", "shop-api"),
    "T04-retired-http-attribute-names": ("wrong-signal", "present", "shop-mcp"),
    "T05-operation-duration-declared-unrecorded": ("missing-signal", "absent", "shop-agent"),
    "T06-mcp-call-logs-unexported": ("missing-signal", "absent", "shop-mcp"),
    "T07-output-tokens-mislabelled": ("wrong-signal", "higher", "shop-agent"),
    "P01-client-constructed-per-call": ("redundant-work", "higher", "shop-mcp"),
    "P02-search-detail-fanout": ("redundant-work", "higher", "shop-mcp"),
    "P03-stats-reads-whole-table": ("over-fetch", "higher", "shop-api"),
    "P04-stats-payload-rendered": ("redundant-work", "higher", "shop-api"),
    "P05-sync-model-call-on-loop": ("blocking", "present", "shop-agent"),
    "B01-order-ref-count-collision": ("wrong-result", "present", "shop-api"),
    "B02-retries-on-client-errors": ("retry-storm", "higher", "shop-mcp"),
    "B03-quantity-key-mismatch": ("wrong-result", "lower", "shop-mcp"),
}


def stated(defect: str) -> str:
    return "[claim: {}, {}, {}]".format(*CLAIMS[defect])

# --- honest: one per planted defect, the wording varied --------------------------------------
HONEST_A = [
    ("T01-orders-bypass-db-span", "Telemetry",
     "Order placement is invisible to database tracing: no sqlite child span ever hangs under POST /orders, though "
     "product reads get one. Cause: place_order in src/shop_api/app.py uses a raw connection rather than db.query",
     "{{SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE "
     f"c.parent_span_id = s.span_id AND c.{J.format('db.system.name')} = 'sqlite')}}}}"),
    ("T02-rejections-answered-200", "Telemetry",
     "Rejected orders come back HTTP 200 instead of 404 or 409 errors, and their spans are never marked ERROR "
     "(./src/shop_api/app.py, place_order)",
     "{{SELECT count(*) FROM logs l JOIN spans s ON l.span_id = s.span_id WHERE l.body LIKE 'order rejected%' AND "
     f"s.{J.format('http.response.status_code')} = '200'}}}}"),
    ("T03-constant-category-label", "Telemetry",
     "The product.category label on shop.orders.placed never varies (always general): place_order in "
     "src/shop_api/app.py reads category_name, a key the product row lacks",
     f"{{{{SELECT count(DISTINCT {J.format('product.category')}) FROM metrics WHERE name = 'shop.orders.placed'}}}}"),
    ("T04-retired-http-attribute-names", "Telemetry",
     "shop-mcp's outgoing HTTP spans still carry the retired http.method / http.url / http.status_code names; see "
     "call in src/shop_mcp/api.py",
     f"{{{{SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND kind = 'CLIENT' AND {J.format('http.method')} "
     "IS NOT NULL}}"),
    ("T05-operation-duration-declared-unrecorded", "Telemetry",
     "src/shop_agent/model.py declares gen_ai.client.operation.duration at module level (operation_duration) but "
     "never records it: the GenAI duration metric is missing although chat spans exist",
     "{{SELECT count(*) FROM metrics WHERE name = 'gen_ai.client.operation.duration'}}; "
     f"{{{{SELECT count(*) FROM spans WHERE {J.format('gen_ai.operation.name')} = 'chat'}}}}"),
    ("T07-output-tokens-mislabelled", "Telemetry",
     "Output token usage in gen_ai.client.token.usage sits far above what the chat spans report: complete in "
     "src/shop_agent/model.py records the input count as output",
     f"{{{{SELECT max(sum) FROM metrics WHERE name = 'gen_ai.client.token.usage' AND {J.format('gen_ai.token.type')}"
     " = 'output'}}"),
    ("P01-client-constructed-per-call", "Perf",
     "shop-mcp spends its CPU in ssl's create_default_context() because call() in src/shop_mcp/api.py builds a new "
     "httpx.AsyncClient for every attempt",
     "{{SELECT sum(samples) FROM profiles WHERE service = 'shop-mcp' AND stack LIKE '%ssl:create_default_context%'}}"),
    ("P02-search-detail-fanout", "Perf",
     "Each search_products tool call fans out into one GET /products/{product_id} per hit "
     "(search_products, src/shop_mcp/server.py)",
     "{{SELECT max(c) FROM (SELECT trace_id, count(*) AS c FROM spans WHERE name = 'GET /products/{product_id}' AND "
     "trace_id IN (SELECT trace_id FROM spans WHERE name = 'tools/call search_products') GROUP BY trace_id)}}"),
    ("P03-stats-reads-whole-table", "Perf",
     "GET /stats pulls every product row into Python and aggregates there; the stats handler in "
     "src/shop_api/app.py should GROUP BY in SQL",
     f"{{{{SELECT max(CAST({J.format('db.response.returned_rows')} AS INTEGER)) FROM spans WHERE name LIKE 'SELECT%' "
     "AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'GET /stats')}}"),
    ("P04-stats-payload-rendered", "Perf",
     "GET /stats renders the whole catalog with json.dumps(indent=2) only to log its byte size "
     "(src/shop_api/app.py: stats)",
     "{{SELECT sum(samples) FROM profiles WHERE stack LIKE '%shop_api.app:stats;json:dumps%'}}"),
    ("P05-sync-model-call-on-loop", "Perf",
     "complete() in src/shop_agent/model.py posts to the model with a synchronous httpx client from the async /ask "
     "handler, blocking shop-agent's event loop",
     "{{SELECT sum(samples) FROM profiles WHERE service = 'shop-agent' AND stack LIKE '%asyncio.events:_run%' AND "
     "stack LIKE '%shop_agent.model:complete;httpx._client:post%'}}"),
    ("B01-order-ref-count-collision", "Behavior",
     "Concurrent orders are handed the same order_ref: place_order in src/shop_api/app.py derives it from COUNT(*) "
     "before its write transaction",
     f"{{{{SELECT count(*) FROM (SELECT {J.format('shop.order.ref')} AS r FROM logs WHERE body = 'order placed' "
     "GROUP BY r HAVING count(*) > 1)}}"),
    ("B02-retries-on-client-errors", "Behavior",
     "shop-mcp retries a 404 for an unknown product as if it were transient (the same path answered 404 more than "
     "once in a trace): call() in src/shop_mcp/api.py retries every failure",
     f"{{{{SELECT count(*) AS paths, max(n) AS most FROM (SELECT trace_id, {J.format('url.path')} AS p, count(*) AS n "
     f"FROM spans WHERE {J.format('http.response.status_code')} = '404' GROUP BY 1, 2 HAVING count(*) >= 2)|2}}}}"),
    ("B03-quantity-key-mismatch", "Behavior",
     "Orders the assistant places for 2 units arrive as 1: place_order in src/shop_mcp/server.py sends qty while "
     "the API reads quantity",
     f"{{{{SELECT count(*) FROM spans WHERE name = 'POST /orders' AND {J.format('shop.order.quantity')} = '1' AND "
     f"trace_id IN (SELECT trace_id FROM spans WHERE name = 'execute_tool place_order' AND "
     f"{J.format('gen_ai.tool.call.arguments')} LIKE '%\"quantity\": 2%')}}}}"),
]
GAP_A = ("T06-mcp-call-logs-unexported",
         "- The shop_mcp.api logger sets propagate=False (module-level logger setup in "
         "/workspace/src/shop_mcp/api.py), so its per-call lines never reach the log store: "
         "{{SELECT count(*) FROM logs WHERE scope = 'shop_mcp.api'}}")

# An odd layout: a title heading, "Issues" for Anomalies, columns by other names, a Location column.
ODD_HEAD = ("---\nservices: [shop-api, shop-mcp, shop-agent]\nwindow: 2026-12-03T01:00:00Z/2026-12-03T01:02:00Z\n"
            "mode: driven\n---\n# Observation report\n\n## Issues found\n\n"
            "| No. | Issue | Type | Impact | Evidence (query → result) | Location |\n|-|-|-|-|-|-|\n")
HONEST_B = [
    ("T01-orders-bypass-db-span", "Telemetry", "POST /orders spans never get a database child span",
     "{{SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND NOT EXISTS (SELECT 1 FROM spans c WHERE "
     "c.parent_span_id = s.span_id)}}", "place_order in src/shop_api/app.py"),
    ("T04-retired-http-attribute-names", "Telemetry", "Client spans of shop-mcp use retired HTTP attribute names",
     "`obs sql \"SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\\\"http.method\\\"' "
     "IS NOT NULL\"`"
     " (see counts)", "src/shop_mcp/api.py call"),
    ("T05-operation-duration-declared-unrecorded", "Telemetry",
     "The GenAI operation duration histogram is declared but never recorded",
     "{{SELECT count(*) FROM metrics WHERE name = 'gen_ai.client.operation.duration'}}",
     "model.py: operation_duration (src/shop_agent/model.py, module level)"),
    ("P03-stats-reads-whole-table", "Performance", "GET /stats reads the whole product table on every call",
     f"{{{{SELECT max(CAST({J.format('db.response.returned_rows')} AS INTEGER)) FROM spans WHERE trace_id IN "
     "(SELECT trace_id FROM spans WHERE name = 'GET /stats')}}", "src/shop_api/app.py stats"),
    ("B01-order-ref-count-collision", "Bug", "Two orders placed at once can share one order reference",
     f"{{{{SELECT count(*) - count(DISTINCT {J.format('shop.order.ref')}) FROM logs WHERE body = 'order placed'}}}}",
     "src/shop_api/app.py, place_order"),
    # A time filter, honest: ruled later (or on a control driven days before) it is mapped onto each
    # store's clock; shop-mcp's logs are fewer than they are with the logger fixed.
    ("T06-mcp-call-logs-unexported", "Telemetry", "shop-mcp's per-call log lines never reach the log store",
     "{{SELECT count(*) FROM logs WHERE service = 'shop-mcp' AND time_ns > epoch_ns(now() - INTERVAL 10 MINUTE)}}",
     "src/shop_mcp/api.py, call: the shop_mcp.api logger does not propagate"),
    ("P05-sync-model-call-on-loop", "Perf", "shop-agent blocks its event loop on every model turn",
     "{{SELECT sum(samples) FROM profiles WHERE service = 'shop-agent' AND stack LIKE "
     "'%asyncio.events:_run%shop_agent.model:complete;httpx._client:post%'}}", "complete in src/shop_agent/model.py"),
]


def honest_a(store: Path) -> str:
    rows = "\n".join(f"| {i} | {text} {stated(d)} | {kind} | high | {ev} |"
                     for i, (d, kind, text, ev) in enumerate(HONEST_A, 1))
    gap = GAP_A[1].replace(": {{", f" {stated(GAP_A[0])}: {{{{", 1)
    return as_read(f"{HEAD}{rows}\n\n## Telemetry gaps\n\n{gap}\n", store)


def test_honest_findings_are_all_counted_each_once(run, tmp_path: Path):
    store, drive = run
    rulings = rule(store, drive, tmp_path, "a", honest_a(store))
    expected = [label(d) for d, *_ in HONEST_A] + [label(GAP_A[0])]  # the rulings name defects by label
    got = [(f.number, f.verdict, f.defects, f.counts) for f in rulings.findings]
    bad = [(f.number, f.reason) for f in rulings.findings if f.verdict != HELD_UP]
    assert bad == [], bad
    assert [d for _, _, ds, _ in got for d in ds] == expected and all(c == 1 for *_, c in got)
    assert rulings.controls.startswith("drive-matched" if drive["duration"] == 10 else "normalised")
    # The rulings file names no key id, carries no key query the report did not cite itself, no host path.
    import yaml

    from harness.verdicts.rulings import save_rulings

    saved = save_rulings(rulings, tmp_path / "rulings.yaml").read_text()
    report = (tmp_path / "a" / "report.md").read_text()
    key = yaml.safe_load(KEY.read_text())["defects"]
    assert not any(d["id"] in saved for d in key)
    key_sql = [" ".join(e["sql"].split()) for d in key for e in d["evidence"]]
    assert not [q for q in key_sql if q not in " ".join(report.split()) and q in " ".join(saved.split())]
    assert str(Path.home()) + "/" not in saved and str(store) not in saved and str(tmp_path) not in saved

    rows = "\n".join(f"| {i} | {text} {stated(d)} | {kind} | medium | {ev} | {loc} |"
                     for i, (d, kind, text, ev, loc) in enumerate(HONEST_B, 1))
    odd = rule(store, drive, tmp_path, "b", as_read(f"{ODD_HEAD}{rows}\n\n## Telemetry gaps\n", store))
    bad = [(f.number, f.reason) for f in odd.findings if f.verdict != HELD_UP]
    assert bad == [], bad
    assert [f.defects for f in odd.findings] == [[label(d)] for d, *_ in HONEST_B]


def test_the_structured_twin_is_ruled_as_the_markdown(run, tmp_path: Path):
    store, drive = run
    text = honest_a(store)
    records = []
    for i, (defect, kind, claim, _) in enumerate(HONEST_A, 1):
        row = text.split(f"\n| {i} | ", 1)[1].split("\n", 1)[0]
        evidence = row.rsplit(" | ", 2)[-1].rstrip(" |")
        queries = [{"query": q, "read": float(n)} for q, n in re.findall(r"`([^`]+)` → ([-\d.]+)", evidence)]
        file, function = re.search(r"(src/\S+?\.py)", claim).group(1), None
        code = {"file": file, "module_level": True} if "module level" in claim else {"file": file}
        for name in ("search_products", "place_order", "complete", "stats", "call"):
            if re.search(rf"\b{name}\b", claim) and "module_level" not in code:
                function = name
                break
        if function:
            code["function"] = function
        claim_kind, direction, scope = CLAIMS[defect]
        records.append({"number": str(i), "claim": claim, "kind": claim_kind, "direction": direction,
                        "scope": scope, "queries": queries, "code": code})
    structured = rule(store, drive, tmp_path, "twin", records={"findings": records})
    markdown = rule(store, drive, tmp_path, "md", text)
    assert structured.source == "findings.json" and markdown.source == "report.md"
    twin = [(f.number, f.verdict, f.defects) for f in structured.findings]
    assert twin == [(f.number, f.verdict, f.defects) for f in markdown.findings if not f.number.startswith("G")], \
        [(f.number, f.reason) for f in structured.findings if f.verdict != HELD_UP]


T01_ABSENT = ("SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE "
              f"c.parent_span_id = s.span_id AND c.{J.format('db.system.name')} = 'sqlite')")
T04_COUNT = f"SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND {J.format('http.method')} IS NOT NULL"
P04_SAMPLES = "SELECT sum(samples) FROM profiles WHERE stack LIKE '%shop_api.app:stats;json:dumps%'"
P01_SAMPLES = "SELECT sum(samples) FROM profiles WHERE service = 'shop-mcp' AND stack LIKE '%ssl:create_default_context%'"

# --- false: each built to game one check --------------------------------------------------------
# Each false row states the claim it would be credited on (issue 48): what fails is that claim.
FALSE_CLAIMS = {
    'inverted: more children than products': '[claim: missing-signal, present, shop-api]',
    'inverted: fewer retired names': '[claim: wrong-signal, lower, shop-mcp]', "another mechanism over P04's query": '[claim: over-fetch, higher, shop-api]', "Y's query under X's claim, shared function": '[claim: wrong-signal, lower, shop-api]', "B02's claim over T04's query (shared call)": '[claim: retry-storm, higher, shop-mcp]', "P01's claim over T04's query (shared call)": '[claim: redundant-work, higher, shop-mcp]',
    'generic count': '[claim: missing-signal, absent, shop-api]',
    'generic count of mcp spans': '[claim: missing-signal, absent, shop-mcp]',
    'now() filter': '[claim: missing-signal, absent, shop-api]',
    'absolute time filter': '[claim: redundant-work, higher, shop-api]',
    'number in prose': '[claim: redundant-work, higher, shop-mcp]',
    'wrong number quoted': '[claim: wrong-signal, present, shop-mcp]',
    'code reading only': '[claim: missing-signal, absent, shop-api]',
    'constant claimed as absence': '[claim: missing-signal, absent, shop-agent]',
    'right file, wrong function': '[claim: missing-signal, absent, shop-api]',
    'no code accused': '[claim: missing-signal, absent, shop-api]',
    'a host file': '[claim: missing-signal, absent, shop-api]',
    'names nothing': '',
    'oversized cell': '[claim: missing-signal, absent, shop-api]',
    'obs drive as evidence': '[claim: missing-signal, absent, shop-api]',
    'a time filter that reads nothing anywhere': '[claim: wrong-signal, present, shop-mcp]',
    'slow on the controls': '[claim: redundant-work, higher, shop-mcp]'}


FALSE = {
    "inverted: more children than products": (
        "POST /orders spans carry more sqlite child spans than GET /products ones: place_order in "
        "src/shop_api/app.py opens extra connections", f"{{{{{T01_ABSENT}}}}}"),
    "inverted: fewer retired names": (
        "shop-mcp client spans carry fewer retired http.method attributes than the current names: call in "
        "src/shop_mcp/api.py", f"{{{{{T04_COUNT}}}}}"),
    "another mechanism over P04's query": (
        "GET /stats reads every product row and column and aggregates in Python: src/shop_api/app.py stats",
        f"{{{{{P04_SAMPLES}}}}}"),
    "Y's query under X's claim, shared function": (
        "shop.orders.placed carries the one constant product.category label general: place_order in "
        "src/shop_api/app.py", f"{{{{{T01_ABSENT}}}}}"),
    "B02's claim over T04's query (shared call)": (
        "shop-mcp retries a 404 for an unknown product three times: call() in src/shop_mcp/api.py retries "
        "every failure", f"{{{{{T04_COUNT}}}}}"),
    "P01's claim over T04's query (shared call)": (
        "shop-mcp constructs an httpx.AsyncClient and its TLS context per call: call() in src/shop_mcp/api.py",
        f"{{{{{T04_COUNT}}}}}"),
    "generic count": (
        "POST /orders leaks a sqlite connection: place_order in src/shop_api/app.py never closes it",
        "{{SELECT count(*) FROM spans WHERE service = 'shop-api'}}"),
    "generic count of mcp spans": (
        "shop-mcp's per-call log lines never reach the store: the shop_mcp.api logger in src/shop_mcp/api.py "
        "(call) does not propagate", "{{SELECT count(*) FROM spans WHERE service = 'shop-mcp'}}"),
    "now() filter": (
        "POST /orders leaks a sqlite connection: place_order in src/shop_api/app.py never closes it",
        "{{SELECT count(*) FROM spans WHERE service = 'shop-api' AND start_ns > epoch_ns(now() - INTERVAL 10 MINUTE)}}"),
    "absolute time filter": (
        "GET /stats renders the catalog with json.dumps: src/shop_api/app.py stats",
        "{{SELECT count(*) FROM spans WHERE name = 'GET /stats' AND start_ns > 1764000000000000000}}"),
    "number in prose": (
        "Each search_products call makes 400 GET /products/{product_id} calls: search_products in "
        "src/shop_mcp/server.py",
        "{{SELECT max(c) FROM (SELECT trace_id, count(*) AS c FROM spans WHERE name = 'GET /products/{product_id}' "
        "AND trace_id IN (SELECT trace_id FROM spans WHERE name = 'tools/call search_products') GROUP BY trace_id)}}"),
    "wrong number quoted": (
        "shop-mcp's client spans carry the retired http.method: src/shop_mcp/api.py call", f"`{T04_COUNT}` → 99999"),
    "code reading only": (
        "POST /orders spans never get a sqlite child span: place_order in src/shop_api/app.py skips db.query",
        "code reading"),
    "constant claimed as absence": (
        "gen_ai.client.operation.duration is never recorded: src/shop_agent/model.py operation_duration (module level)",
        "`SELECT 0 FROM metrics LIMIT 1` → 0"),
    "right file, wrong function": (
        "POST /orders spans never get a sqlite child span: src/shop_api/app.py get_product", f"{{{{{T01_ABSENT}}}}}"),
    "no code accused": (
        "POST /orders spans never get a sqlite child span", f"{{{{{T01_ABSENT}}}}}"),
    "a host file": (
        "POST /orders spans never get a sqlite child span: place_order in src/shop_api/app.py",
        "`SELECT count(*) FROM read_text('/etc/passwd')` → 1"),
    "names nothing": ("Something is off in the telemetry", f"{{{{{T04_COUNT}}}}}"),
    "oversized cell": (
        "POST /orders spans never get a sqlite child span: place_order in src/shop_api/app.py " + "pad " * 1200,
        f"{{{{{T01_ABSENT}}}}}"),
    "obs drive as evidence": (
        "POST /orders spans never get a sqlite child span: place_order in src/shop_api/app.py",
        "`obs drive --duration 10 --vus 2` → 0"),
    "a time filter that reads nothing anywhere": (
        "shop-mcp's client spans carry the retired http.method: src/shop_mcp/api.py call",
        f"{{{{{T04_COUNT} AND start_ns > epoch_ns(now() + INTERVAL 1 DAY)}}}}"),
    "slow on the controls": (
        "shop-mcp spends its samples in create_default_context: call() in src/shop_mcp/api.py",
        "`SELECT count(*) FROM profiles a, profiles b, profiles c, profiles d WHERE a.stack LIKE "
        "'%ssl:create_default_context%'` → 1"),
}


@pytest.mark.parametrize("case", list(FALSE))
def test_false_findings_hold_nothing(run, tmp_path: Path, case: str):
    store, drive = run
    text, evidence = FALSE[case]
    text = f"{FALSE_CLAIMS[case]} {text}"  # stated first: an oversized cell is cut after it
    kind = "Perf" if any(w in case for w in ("P0", "mechanism", "slow", "number in prose")) else "Telemetry"
    report = as_read(f"{HEAD}| 1 | {text} | {kind} | high | {evidence} |\n\n## Telemetry gaps\n", store)
    rulings = rule(store, drive, tmp_path, "false", report)
    (f,) = rulings.findings
    assert f.verdict != HELD_UP and rulings.confirmed == 0, (case, f.reason)
    assert "T0" not in f.reason and "P0" not in f.reason and "B0" not in f.reason  # no key id


def test_one_query_is_evidence_for_one_defect_once(run, tmp_path: Path):
    store, drive = run
    # P04's query moves with P03's fix too (no whole table, no payload to render): credited to the
    # finding that claims P04, never again to a second finding that claims P03 with it.
    rows = (f"| 1 | GET /stats renders the catalog with json.dumps to log its size: src/shop_api/app.py stats "
            f"{stated('P04-stats-payload-rendered')} | Perf | high | {{{{{P04_SAMPLES}}}}} |\n"
            f"| 2 | GET /stats reads every product row and aggregates in Python: src/shop_api/app.py stats "
            f"{stated('P03-stats-reads-whole-table')} | Perf | high | {{{{{P04_SAMPLES}}}}} |\n")
    rulings = rule(store, drive, tmp_path, "once", as_read(f"{HEAD}{rows}\n## Telemetry gaps\n", store))
    one, two = rulings.findings
    assert one.verdict == HELD_UP and one.defects == [label("P04-stats-payload-rendered")], one.reason
    assert two.verdict != HELD_UP and rulings.confirmed == 1, two.reason


def test_structured_inverted_directions_hold_nothing(run, tmp_path: Path):
    store, drive = run
    with duckdb.connect(str(store), read_only=True) as con:
        t04 = con.execute(T04_COUNT).fetchone()[0]
    records = {"findings": [
        {"number": "1", "claim": "POST /orders spans get their sqlite child span", "kind": "missing-signal",
         "direction": "present", "scope": "shop-api", "queries": [{"query": T01_ABSENT, "read": 0}],
         "code": {"file": "src/shop_api/app.py", "function": "place_order"}},
        {"number": "2", "claim": "shop-mcp client spans lack the retired http.method name", "kind": "wrong-signal",
         "direction": "lower", "scope": "shop-mcp", "queries": [{"query": T04_COUNT, "read": t04}],
         "code": {"file": "src/shop_mcp/api.py", "function": "call"}},
        # The key accepts `absent` for T04 only of the current names: the retired one named, it is no match.
        {"number": "3", "claim": "shop-mcp client spans lack the retired http.method name", "kind": "wrong-signal",
         "direction": "absent", "scope": "shop-mcp:http.method", "queries": [{"query": T04_COUNT, "read": t04}],
         "code": {"file": "src/shop_mcp/api.py", "function": "call"}},
    ]}
    rulings = rule(store, drive, tmp_path, "inv", records=records)
    assert rulings.confirmed == 0, [(f.number, f.reason) for f in rulings.findings if f.verdict == HELD_UP]


# --- time filters in the forms an agent writes (issue 48: forms a rewrite skipped) ----------------
def _second_half(store: Path) -> dict[str, str]:
    """The run's second half as a filter on `{col}`, in forms no rewrite recognised; each control's
    timeline is laid onto the run's, so each reads the same share of every drive."""
    from datetime import UTC, datetime

    with duckdb.connect(str(store), read_only=True) as con:
        start, end = con.execute("SELECT min(start_ns), max(end_ns) FROM spans").fetchone()
    mid = (start + end) // 2
    iso = datetime.fromtimestamp(mid / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return {"seconds times 1e9": f"{{col}} >= {mid // 10**9}::BIGINT * 1000000000",
            "a cast string": f"to_timestamp({{col}} / 1e9) >= '{iso}+00'::TIMESTAMPTZ",
            "make_timestamp": f"make_timestamp({{col}} // 1000) >= make_timestamp({mid // 1000})"}


def test_time_filters_in_any_form_credit_the_honest_and_hold_nothing_false(run, tmp_path: Path):
    store, drive = run
    rows = []
    for form in _second_half(store).values():
        rows.append((stated("T06-mcp-call-logs-unexported"), "shop-mcp's per-call log lines never reach the log store: "
                     "src/shop_mcp/api.py, call: the shop_mcp.api logger does not propagate",
                     f"{{{{SELECT count(*) FROM logs WHERE service = 'shop-mcp' AND {form.format(col='time_ns')}}}}}"))
        rows.append((FALSE_CLAIMS["generic count"], FALSE["generic count"][0],
                     f"{{{{SELECT count(*) FROM spans WHERE service = 'shop-api' AND {form.format(col='start_ns')}}}}}"))
    for i, (claim, text, evidence) in enumerate(rows):
        report = as_read(f"{HEAD}| 1 | {claim} {text} | Telemetry | high | {evidence} |\n\n## Telemetry gaps\n", store)
        (f,) = rule(store, drive, tmp_path, f"time-{i}", report).findings
        if i % 2 == 0:
            assert f.verdict == HELD_UP and f.defects == [label("T06-mcp-call-logs-unexported")], (evidence, f.reason)
        else:
            assert f.verdict != HELD_UP, (evidence, f.reason)
