"""Issue 59's acceptance, on real observability stores (both drive shapes: 10 s x 2 users,
drive-matched; 120 s x 5 users, normalised) and the mission's real control stores: a finding is
credited for evidence of its defect, not for a difference a fix happens to make.

False classes, each built to defeat one check, none held:
- a log filter on `code.line.number` (with the accused function's name, so that only the fixes
  keeping their lines protect it), and the key-blind line-number shotgun, which scores 0;
- another defect's key evidence, and the drive's general load (whole-service count, sum, max,
  negated), under each defect's own claim and code;
- an open claim (one the key states without targets) naming a target outside its defect;
- `[claim: ...]` hidden from a reader (an HTML comment, a hidden element), the row's visible text
  saying there is no anomaly;
- enumeration: one location under every kind and direction, a `file` naming every function, a Code
  cell naming several: never a higher score than the honest report.

Honest classes, each credited: the key-blind second and third statements of a true finding (P02 as
over-fetch, P03 as redundant work, latency of a Perf defect, T03/T07 present, T04 missing-signal,
B02 errors, the plausible targets `call`, `/stats`, `CLIENT`, `chat`); the prompt's hand-written
form, credited as its records would be.

And what the controls are: each differs from the unfixed stores only in its defect's telemetry
(the same source positions, the same span names but those its own fix writes)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml

from harness.verdicts import controls as ctl
from harness.verdicts.key import label
from harness.verdicts.rulings import HELD_UP
from harness.verdicts.scoring import score_local
from test_claim_adversarial import HEAD, HONEST_A, J, KEY, MISSION, as_read, rule, run  # noqa: F401
from test_claims_records import (API, AGENT, B01_SHARED, B02_REPEATS, B03_ONE, MCP, P01_TLS, P02_FANOUT,  # noqa: F401
                                 P03_ROWS, P04_DUMPS, P05_LOOP, SERVER, T01_WITH, T02_REJECTED, T03_DISTINCT,
                                 T04_CURRENT, T04_RETIRED, T05_DURATION, T06_LOGS, T07_OUTPUT, reading, record)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DEFECTS = yaml.safe_load(KEY.read_text())["defects"]
BY_ID = {d["id"]: d for d in DEFECTS}
FIXES = yaml.safe_load((MISSION / "key" / "fixes.yaml").read_text())


def _where(d: dict) -> tuple[str, str]:
    """A defect's code as an honest agent names it: its file under the workspace, the first function
    of its location that file defines."""
    import re

    from harness.verdicts.accused import _defs

    file = d["location"]["file"].removeprefix("workspace/")
    defined = _defs(MISSION / "workspace")[file]
    function = next(w for w in re.findall(r"[A-Za-z_]\w*", d["location"]["function"]) if w in defined)
    return file, function


def _claim(d: dict) -> tuple[str, str, str]:
    """The first claim the key states for a defect, as one record states it."""
    c = d["claims"][0]
    direction = c["direction"] if isinstance(c["direction"], str) else c["direction"][0]
    scope = c["scope"] if isinstance(c["scope"], str) else c["scope"][0]
    return c["kind"], direction, scope


def _held(rulings) -> list[tuple[str, str]]:
    return [(f.number, f.reason) for f in rulings.findings if f.verdict == HELD_UP]


def _never_over_budget(rulings) -> None:
    """A false row refused because the rule ran out of time proves nothing: none may be."""
    assert not [f.number for f in rulings.findings if "budget" in f.reason], \
        [(f.number, f.reason) for f in rulings.findings if "budget" in f.reason]


def _score(rulings, total_s: float = 1200.0) -> float:
    """The local row's score a report's rulings would give (the run's time fixed)."""
    n = rulings.confirmed
    return score_local(f"{total_s / n:.0f}s" if n else None, f"{int(total_s)}s", f"{rulings.accuracy}%", n).score


# --- the controls differ from the unfixed stores only in their defect's telemetry ----------------

def _log_lines(path: Path) -> dict[tuple, set[str]]:
    sql = (f"SELECT DISTINCT service, scope, {J.format('code.function.name')}, {J.format('code.line.number')} "
           "FROM logs")
    with duckdb.connect(str(path), read_only=True) as con:
        out: dict[tuple, set[str]] = {}
        for service, scope, function, line in con.execute(sql).fetchall():
            out.setdefault((service, scope, function), set()).add(line)
    return out


def _span_names(path: Path) -> set[tuple[str, str]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return set(con.execute("SELECT DISTINCT service, name FROM spans").fetchall())


def test_each_control_differs_from_the_run_only_in_its_defects_telemetry(run):
    store, drive = run
    folder = ctl.build(MISSION)
    fixes = ctl.load_fixes(MISSION)
    base_lines = [_log_lines(folder / ctl.store_name(b, fixes)) for b in ctl.BASELINES] + [_log_lines(store)]
    base_names = set.union(*[_span_names(folder / ctl.store_name(b, fixes)) for b in ctl.BASELINES])
    for name, edits in fixes.items():
        lines = _log_lines(folder / ctl.store_name(name, fixes))
        # The same log statement sits at the same line in every store (a fix keeps its lines): a
        # count at a line number reads the same with the defect fixed.
        for key, seen in lines.items():
            for other in base_lines:
                if key in other:
                    assert seen == other[key], (name, key, seen, other[key])
        # The span names differ only by those its own fix writes (T01's `INSERT orders`).
        written = " ".join(e["replace"] for e in FIXES["fixes"][name])
        new = {n for _, n in _span_names(folder / ctl.store_name(name, fixes)) - base_names}
        assert all(n in written for n in new), (name, new)


# --- false: line numbers ----------------------------------------------------------------------

def _line_rows(store: Path, d: dict) -> list[dict]:
    """One record per log line of the run: a count of the logs at that line of the defect's own
    function (its name in the query, so that the query reads the defect's code), under its claim."""
    file, function = _where(d)
    kind, direction, scope = _claim(d)
    with duckdb.connect(str(store), read_only=True) as con:
        lines = con.execute(f"SELECT DISTINCT service, {J.format('code.function.name')}, "
                            f"{J.format('code.line.number')} FROM logs ORDER BY 1, 2, 3").fetchall()
    out = []
    for i, (service, fn, line) in enumerate(lines[:20], 1):
        query = (f"SELECT count(*) FROM logs WHERE service = '{service}' AND "
                 f"{J.format('code.function.name')} = '{function}' AND {J.format('code.line.number')} = '{line}'")
        out.append(record(store, str(i), kind, direction, scope, file, function, f"the log at line {line} of {fn}",
                          query))
    return out


@pytest.mark.parametrize("defect", [d["id"] for d in DEFECTS])
def test_a_count_at_a_line_number_holds_nothing(run, tmp_path: Path, defect: str):
    store, drive = run
    rulings = rule(store, drive, tmp_path, "lines", records={"findings": _line_rows(store, BY_ID[defect])})
    _never_over_budget(rulings)
    assert _held(rulings) == []


def test_a_key_blind_line_number_shotgun_scores_nothing(run, tmp_path: Path):
    """Every defect's claim and code, each line of the run's logs: no observation, no score."""
    store, drive = run
    records = []
    for d in DEFECTS:
        for r in _line_rows(store, d)[:6]:
            records.append({**r, "number": str(len(records) + 1)})
    rulings = rule(store, drive, tmp_path, "shotgun", records={"findings": records})
    assert rulings.confirmed == 0 and _score(rulings) == 0.0, _held(rulings)


# --- false: another defect's evidence, the drive's general load --------------------------------

def _same_claim(d: dict, e: dict) -> bool:
    """Whether the claim d's first key claim states also states e at the same code: then e's
    evidence under it is an honest statement of e (ruled so), not a false row."""
    from harness.telemetry import claims as cm

    vocab = cm.load_vocabulary(MISSION)
    kind, direction, scope = _claim(d)
    stated = cm.record_claim(kind, direction, scope, vocab)
    return _where(d) == _where(e) and cm.matches(stated, cm.key_claims(e["claims"], vocab, e["id"])) is not None


GENERAL = [
    "SELECT count(*) FROM spans WHERE service = '{s}'",
    "SELECT sum(duration_ms) FROM spans WHERE service = '{s}'",
    "SELECT max(duration_ms) FROM spans WHERE service = '{s}'",
    "SELECT -sum(duration_ms) FROM spans WHERE service = '{s}'",
    "SELECT count(*) FROM logs WHERE service = '{s}'",
    "SELECT count(*) FROM spans WHERE service = '{s}' AND status_code = 'ERROR'",
    "SELECT count(DISTINCT trace_id) FROM spans WHERE service = '{s}'",
]


@pytest.mark.parametrize("defect", [d["id"] for d in DEFECTS])
def test_another_defects_evidence_and_the_drives_load_hold_nothing(run, tmp_path: Path, defect: str):
    from harness.telemetry import claims as cm
    from harness.verdicts.discriminate import _names
    from harness.telemetry import sqlread
    from harness.verdicts.key import load_key

    store, drive = run
    d = BY_ID[defect]
    file, function = _where(d)
    kind, direction, scope = _claim(d)
    own = next(k for k in load_key(KEY, cm.load_vocabulary(MISSION)) if k.id == defect).scope
    hidden = set((FIXES.get("hides") or {}).get(defect, [])) | \
        {k for k, v in (FIXES.get("hides") or {}).items() if defect in v}
    # Another defect's key evidence, but where it reads this one's telemetry too (a count of the
    # routes this one fans out to, of the failed calls this one repeats): that is evidence of both.
    queries = [sql for e in DEFECTS if e["id"] != defect and e["id"] not in hidden and not _same_claim(d, e)
               for sql in (" ".join(ev["sql"].split()) for ev in e["evidence"])
               if not any(_names(lit, own) for lit in (lambda sh: sh.literals - sh.service_literals)(sqlread.parse(sql)))]
    # The drive's load: whole-service readings (but those that read what the claim is about: the log
    # table of a defect about logs, the error status of one about errors), plain and with a literal
    # naming the defect that selects nothing.
    dead = f" AND scope <> '{own[0]}'"
    for q in GENERAL:
        if any(w in own for w in ("logs" if "FROM logs" in q else "", "error" if "ERROR" in q else "")):
            continue
        queries += [q.format(s=scope), q.format(s=scope) + dead]
    records = [record(store, str(i), kind, direction, scope, file, function, "what the key says of another", q)
               for i, q in enumerate(queries, 1)]
    for chunk in range(0, len(records), 8):  # a report each, so that no earlier row's credit masks a later one
        rulings = rule(store, drive, tmp_path, f"other-{chunk}", records={"findings": records[chunk:chunk + 8]})
        _never_over_budget(rulings)
        assert _held(rulings) == [], [(queries[int(n) - 1], why) for n, why in _held(rulings)]


# --- false: open scopes ----------------------------------------------------------------------------

# (defect, kind, direction, scope with a target outside the defect, file, function, query): each query
# is honest evidence of the defect under the same claim WITHOUT that target (the twin below).
OPEN = [
    ("T02-rejections-answered-200", "errors", "lower", "shop-api:GET /stats", API, "place_order", T02_REJECTED),
    ("P01-client-constructed-per-call", "latency", "higher", "shop-mcp:tools/call search_products", MCP, "call",
     "SELECT median(duration_ms) FROM spans WHERE service = 'shop-mcp' AND kind = 'CLIENT'"),
    ("P02-search-detail-fanout", "over-fetch", "higher", "shop-mcp:shop.order.quantity", SERVER, "search_products",
     P02_FANOUT),
    ("P03-stats-reads-whole-table", "latency", "higher", "shop-api:POST /orders", API, "stats",
     "SELECT avg(duration_ms) FROM spans WHERE name = 'GET /stats'"),
    ("B02-retries-on-client-errors", "errors", "higher", "shop-mcp:gen_ai.client.token.usage", MCP, "call",
     f"SELECT max(CAST({J.format('retry.attempt')} AS INTEGER)) FROM spans WHERE service = 'shop-mcp'"),
]


@pytest.mark.parametrize("case", range(len(OPEN)))
def test_an_open_claim_with_a_target_outside_its_defect_holds_nothing(run, tmp_path: Path, case: int):
    store, drive = run
    defect, kind, direction, scope, file, function, query = OPEN[case]
    wide = rule(store, drive, tmp_path, "open", records={"findings": [
        record(store, "1", kind, direction, scope, file, function, "an open claim", query)]})
    assert _held(wide) == []
    # Its twin without the target is credited: the target alone refused it.
    twin = rule(store, drive, tmp_path, "twin", records={"findings": [
        record(store, "1", kind, direction, scope.split(":")[0], file, function, "an open claim", query)]})
    assert [f.defects for f in twin.findings if f.verdict == HELD_UP] == [[label(defect)]], \
        [f.reason for f in twin.findings]


# --- false: a claim no reader sees -----------------------------------------------------------------

HIDE = {
    "comment": "<!-- {claim} -->",
    "hidden element": '<span hidden>{claim}</span>',
    "display none": '<span style="display: none">{claim}</span>',
    "unclosed comment": "<!-- {claim}",
}


@pytest.mark.parametrize("how", list(HIDE))
def test_a_claim_hidden_from_the_reader_holds_nothing(run, tmp_path: Path, how: str):
    from test_claim_adversarial import stated

    store, drive = run
    rows = "\n".join(f"| {i} | No anomaly here. {HIDE[how].format(claim=stated(d))} {text} | {kind} | high | {ev} |"
                     for i, (d, kind, text, ev) in enumerate(HONEST_A, 1))
    rulings = rule(store, drive, tmp_path, "hidden", as_read(f"{HEAD}{rows}\n\n## Telemetry gaps\n", store))
    assert _held(rulings) == [] and all("ambiguous" in f.reason for f in rulings.findings)


# --- enumeration -------------------------------------------------------------------------------------

def test_enumeration_never_raises_a_score(run, tmp_path: Path):
    store, drive = run
    from harness.telemetry.claims import load_vocabulary

    vocab = load_vocabulary(MISSION)
    honest = [record(store, "1", "over-fetch", "higher", "shop-api", API, "stats", "GET /stats reads every row",
                     P03_ROWS)]
    honest_rulings = rule(store, drive, tmp_path, "honest", records={"findings": honest})
    assert honest_rulings.confirmed == 1
    # The same observation and code under every kind and every direction.
    guesses = [record(store, str(i), kind, direction, "shop-api", API, "stats", "GET /stats reads every row", P03_ROWS)
               for i, (kind, direction) in enumerate(((k, dr) for k in vocab.kinds for dr in vocab.directions), 1)]
    enumerated = rule(store, drive, tmp_path, "enumerated", records={"findings": guesses})
    assert enumerated.confirmed <= 1 and enumerated.reported == len(guesses)
    assert _score(enumerated) < _score(honest_rulings)
    # Restating the true finding, once credited, costs like any false row.
    again = rule(store, drive, tmp_path, "again", records={"findings": honest + [
        {**honest[0], "number": str(i)} for i in range(2, 6)]})
    assert again.confirmed == 1 and again.reported == 5 and _score(again) < _score(honest_rulings)


def test_one_finding_accuses_one_location(run, tmp_path: Path):
    store, drive = run
    # A record whose `file` names every function is no file of the sources: it accuses nothing.
    every = record(store, "1", "over-fetch", "higher", "shop-api", API, "stats", "GET /stats reads every row", P03_ROWS)
    every["code"] = {"file": f"{API} place_order stats get_order list_products", "module_level": True}
    rulings = rule(store, drive, tmp_path, "every", records={"findings": [every]})
    assert _held(rulings) == []
    # A Code cell naming several functions accuses the first it names.
    row = ("| 1 | GET /stats reads every product row | over-fetch | higher | shop-api | "
           f"{API}: place_order, get_order, stats, list_products | high | {{{{{P03_ROWS}}}}} |")
    form = ("| # | Finding | Kind | Direction | Scope | Code | Severity | Evidence |\n"
            "|---|---|---|---|---|---|---|---|\n")
    rulings = rule(store, drive, tmp_path, "several", as_read(HEAD.split("| # |")[0] + form + row + "\n", store))
    assert _held(rulings) == [] and "does not accuse" in rulings.findings[0].reason
    first = row.replace(f"{API}: place_order, get_order, stats", f"{API}: stats, place_order, get_order")
    rulings = rule(store, drive, tmp_path, "first", as_read(HEAD.split("| # |")[0] + form + first + "\n", store))
    assert [f.defects for f in rulings.findings if f.verdict == HELD_UP] == [[label("P03-stats-reads-whole-table")]]


def test_a_row_under_a_shared_claim_is_credited_with_its_querys_defect(run, tmp_path: Path):
    """Redundant work at stats states P03 and P04 (issue 59): P03's rows under it are P03's, never P04's."""
    store, drive = run
    rows = [record(store, "1", "redundant-work", "higher", "shop-api", API, "stats", "stats renders the catalog",
                   f"{P03_ROWS} AND name NOT LIKE '%json:dumps%'")]
    rulings = rule(store, drive, tmp_path, "shared", records={"findings": rows})
    assert [f.defects for f in rulings.findings if f.verdict == HELD_UP] in ([[label("P03-stats-reads-whole-table")]], [])


# --- honest: every reasonable key-blind statement --------------------------------------------------

# (defect, kind, direction, scope, file, function, query): what a careful agent that reads only the
# prompt, `obs finding add --help` and the vocabulary could state, other than the key's first claim.
REASONABLE = [
    ("P02-search-detail-fanout", "over-fetch", "higher", "shop-mcp", SERVER, "search_products", P02_FANOUT),
    ("P02-search-detail-fanout", "latency", "higher", "shop-mcp:tools/call search_products", SERVER,
     "search_products", "SELECT avg(duration_ms) FROM spans WHERE name = 'tools/call search_products'"),
    ("P03-stats-reads-whole-table", "redundant-work", "higher", "shop-api:/stats", API, "stats", P03_ROWS),
    ("P03-stats-reads-whole-table", "latency", "higher", "shop-api:GET /stats", API, "stats",
     "SELECT avg(duration_ms) FROM spans WHERE name = 'GET /stats'"),
    ("P01-client-constructed-per-call", "latency", "higher", "shop-mcp:CLIENT", MCP, "call",
     "SELECT median(duration_ms) FROM spans WHERE service = 'shop-mcp' AND kind = 'CLIENT'"),
    ("T03-constant-category-label", "wrong-signal", "present", "shop-api:shop.orders.placed", API, "place_order",
     f"SELECT count(*) FROM metrics WHERE name = 'shop.orders.placed' AND {J.format('product.category')} = 'general'"),
    ("T07-output-tokens-mislabelled", "wrong-signal", "present", "shop-agent:chat", AGENT, "complete", T07_OUTPUT),
    ("T04-retired-http-attribute-names", "missing-signal", "absent", "shop-mcp:http.request.method", MCP, "call",
     T04_CURRENT),
    ("T04-retired-http-attribute-names", "wrong-signal", "present", "shop-mcp:CLIENT", MCP, "call", T04_RETIRED),
    ("B02-retries-on-client-errors", "errors", "higher", "shop-mcp", MCP, "call",
     f"SELECT max(CAST({J.format('retry.attempt')} AS INTEGER)) FROM spans WHERE service = 'shop-mcp'"),
    ("T06-mcp-call-logs-unexported", "missing-signal", "absent", "shop-mcp:call", MCP, "call", T06_LOGS),
    ("T05-operation-duration-declared-unrecorded", "missing-signal", "absent", "shop-agent:chat", AGENT, "complete",
     T05_DURATION),
    ("T02-rejections-answered-200", "wrong-signal", "present", "shop-api:status_code", API, "place_order",
     T02_REJECTED),
    ("B01-order-ref-count-collision", "wrong-result", "higher", "shop-api:order_ref", API, "place_order", B01_SHARED),
    ("B03-quantity-key-mismatch", "wrong-result", "lower", "shop-mcp:qty", SERVER, "place_order", B03_ONE),
    ("T01-orders-bypass-db-span", "missing-signal", "lower", "shop-api:db.query", API, "place_order", T01_WITH),
]


@pytest.mark.parametrize("case", range(len(REASONABLE)))
def test_a_reasonable_key_blind_statement_is_credited(run, tmp_path: Path, case: int):
    store, drive = run
    defect, kind, direction, scope, file, function, query = REASONABLE[case]
    rulings = rule(store, drive, tmp_path, "reasonable", records={"findings": [
        record(store, "1", kind, direction, scope, file, function, "as a careful agent states it", query)]})
    (f,) = rulings.findings
    assert (f.verdict, f.defects) == (HELD_UP, [label(defect)]), f.reason


# --- honest: the prompt's own hand-written form ---------------------------------------------------

def test_the_hand_written_form_is_credited_as_its_records(run, tmp_path: Path):
    from test_claim_adversarial import CLAIMS

    store, drive = run
    prompt = (MISSION / "prompt.md").read_text()
    header = next(line for line in prompt.splitlines() if line.startswith("| # |"))
    rule_line = next(line for line in prompt.splitlines() if line.startswith("|---"))
    rows, records = [], []
    for i, (d, _kind, text, ev) in enumerate(HONEST_A, 1):
        kind, direction, scope = CLAIMS[d]
        file, function = _where(BY_ID[d])
        rows.append(f"| {i} | {text} | {kind} | {direction} | {scope} | {file} {function} | high | {ev} |")
    report = as_read(HEAD.split("| # |")[0] + header + "\n" + rule_line + "\n" + "\n".join(rows) + "\n", store)
    hand = rule(store, drive, tmp_path, "hand", report)
    for i, (d, *_), in enumerate(HONEST_A, 1):
        kind, direction, scope = CLAIMS[d]
        file, function = _where(BY_ID[d])
        row = report.split(f"\n| {i} | ", 1)[1].split("\n", 1)[0]
        queries = [{"query": q, "read": float(n)} for q, n in
                   __import__("re").findall(r"`([^`]+)` → ([-\d.]+)", row.rsplit(" | ", 2)[-1])]
        records.append({"number": str(i), "claim": "as in the row", "kind": kind, "direction": direction,
                        "scope": scope, "queries": queries, "code": {"file": file, "function": function}})
    twin = rule(store, drive, tmp_path, "records", records={"findings": records})
    assert [(f.number, f.verdict, f.defects) for f in hand.findings] == \
        [(f.number, f.verdict, f.defects) for f in twin.findings]
    assert hand.confirmed == len(HONEST_A), [(f.number, f.reason) for f in hand.findings if f.verdict != HELD_UP]
    # The person ruling sees the claim each row states.
    assert all(f"({CLAIMS[d][0]}, {CLAIMS[d][1]}" in f.reason for f, (d, *_) in zip(hand.findings, HONEST_A))
    json.dumps([f.model_dump() for f in hand.findings], default=str)


# --- issue 64, item 0: control stores that do not depend on the box ---------------------------------

BUSY_BUILT = ("B01-order-ref-count-collision", "P04-stats-payload-rendered")  # the race, a sampled profile


def test_controls_built_beside_a_busy_process_give_the_honest_verdicts(tmp_path: Path, monkeypatch):
    """The race (B01) and a sampled profile (P04) are what a busy box once flipped: built
    beside a CPU-bound process, each store is checked against the key as it is built, and the
    honest findings of those defects are credited on them."""
    import subprocess
    import sys

    from observed_drive import cached_store
    from test_claim_adversarial import stated

    drive = {"duration": 10, "vus": 2}
    store = cached_store(drive)  # the machine's cached run store, before the cache moves
    monkeypatch.setenv("LLMS_BENCHMARK_CACHE", str(tmp_path / "cache"))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        folder = ctl.build(MISSION, only=[*ctl.BASELINES, *BUSY_BUILT], say=lambda m: None)
    finally:
        hog.kill()
        hog.wait()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["stores"]) == {*ctl.BASELINES, *BUSY_BUILT}
    for name, entry in manifest["stores"].items():
        # How each was built is on record: the box's load, the tries, the key's check.
        assert entry["check"] == ctl.CHECK_VERSION and entry["problems"] == [] and entry["box_before"]["cpus"]
        assert all(shows for d, shows in entry["shows"].items() if d != name and d in BUSY_BUILT)
    assert ctl.Controls.for_mission(MISSION) is not None
    rows = "\n".join(f"| {i} | {text} {stated(d)} | {kind} | high | {ev} |"
                     for i, (d, kind, text, ev) in enumerate(HONEST_A, 1) if d in BUSY_BUILT)
    rulings = rule(store, drive, tmp_path, "busy", as_read(f"{HEAD}{rows}\n\n## Telemetry gaps\n", store))
    assert [f.defects for f in rulings.findings if f.verdict == HELD_UP] == \
        [[label(d)] for d, *_ in HONEST_A if d in BUSY_BUILT], [f.reason for f in rulings.findings]


def test_a_set_not_checked_when_built_is_never_used(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMS_BENCHMARK_CACHE", str(tmp_path / "cache"))
    folder = ctl.controls_dir(MISSION)
    folder.mkdir(parents=True)
    fixes = ctl.load_fixes(MISSION)
    for name in ctl.BASELINES:
        (folder / ctl.store_name(name, fixes)).write_bytes(b"")
    (folder / "manifest.json").write_text(json.dumps({"stores": {b: {"file": f"{b}.duckdb"} for b in ctl.BASELINES}}))
    assert ctl.Controls.for_mission(MISSION) is None  # built before the check (or by hand): rebuilt, never trusted
