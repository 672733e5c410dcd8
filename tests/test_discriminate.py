"""Issue 34, items 2-4, on small real DuckDB stores written for the purpose: a cited query singles
out the defect its claim names only when it reads differently on that defect's control, in the
claimed direction, and not as far with another defect fixed; controls driven shorter than the run
are compared per request; time filters are mapped onto each store's clock; a missing control is a
named refusal; each query has a time budget across all stores and a byte cap on its result."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from harness.telemetry.schema import create_all, insert_sql
from harness.verdicts import controls as ctl
from harness.verdicts import discriminate as dc
from harness.verdicts import cited as ci
from harness.verdicts import evidence as ev
from harness.verdicts.rerun_store import Store

T01, T04 = "T01-orders-bypass-db-span", "T04-retired-http-attribute-names"
DAY = 86_400 * 10**9
RUN_T0 = 1_764_740_000 * 10**9  # 2025-12-03
CONTROL_T0 = RUN_T0 - 9 * DAY


def _spans(con, rows: list[dict]) -> None:
    cols = ["trace_id", "span_id", "parent_span_id", "service", "name", "kind", "start_ns", "end_ns", "duration_ms",
            "status_code", "status_message", "attributes", "resource", "scope", "events"]
    data = [[r.get(c) for r in rows] for c in cols]
    con.execute(insert_sql("spans"), data)


def make_store(path: Path, t0: int, orders: int, products: int, mcp: int, order_child: bool = False,
               new_names: bool = False) -> Path:
    """`orders` POST /orders traces (with a sqlite child when `order_child`), `products` GET
    /products/{id} traces with their sqlite child, `mcp` shop-mcp client spans (retired
    http.method, or the current names with `new_names`); one per second from t0."""
    rows, t = [], t0
    for i in range(orders):
        tid = f"o{i:031d}"
        rows.append(dict(trace_id=tid, span_id=f"o{i:015d}", parent_span_id=None, service="shop-api",
                         name="POST /orders", kind="SERVER", start_ns=t, end_ns=t + 10**7, duration_ms=10.0,
                         status_code="UNSET", attributes="{}"))
        if order_child:
            rows.append(dict(trace_id=tid, span_id=f"c{i:015d}", parent_span_id=f"o{i:015d}", service="shop-api",
                             name="INSERT orders", kind="CLIENT", start_ns=t + 1, end_ns=t + 10**6,
                             duration_ms=1.0, status_code="UNSET", attributes='{"db.system.name": "sqlite"}'))
        t += 10**9
    for i in range(products):
        tid = f"p{i:031d}"
        rows.append(dict(trace_id=tid, span_id=f"p{i:015d}", parent_span_id=None, service="shop-api",
                         name="GET /products/{product_id}", kind="SERVER", start_ns=t, end_ns=t + 10**7,
                         duration_ms=10.0, status_code="UNSET", attributes="{}"))
        rows.append(dict(trace_id=tid, span_id=f"q{i:015d}", parent_span_id=f"p{i:015d}", service="shop-api",
                         name="SELECT products", kind="CLIENT", start_ns=t + 1, end_ns=t + 10**6, duration_ms=1.0,
                         status_code="UNSET", attributes='{"db.system.name": "sqlite"}'))
        t += 10**9
    for i in range(mcp):
        attrs = {"http.request.method": "GET"} if new_names else {"http.method": "GET"}
        rows.append(dict(trace_id=f"m{i:031d}", span_id=f"m{i:015d}", parent_span_id=None, service="shop-mcp",
                         name="GET", kind="CLIENT", start_ns=t, end_ns=t + 10**7, duration_ms=10.0,
                         status_code="UNSET", attributes=json.dumps(attrs)))
        t += 10**9
    with duckdb.connect(str(path)) as con:
        create_all(con)
        _spans(con, rows)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A run driven 10× longer than its controls (40 orders vs 4), the two baselines, T01's and
    T04's controls; T04's fix also lets the (unrelated) mcp spans through in greater number, so a
    query counting both moves with either fix."""
    root = tmp_path_factory.mktemp("world")
    run = make_store(root / "run.duckdb", RUN_T0, orders=40, products=40, mcp=30)
    fixes = {T01: [ctl.Fix("a.py", "x", "y")], T04: [ctl.Fix("b.py", "x", "y")]}
    folder = root / "controls"
    folder.mkdir()
    for name in ctl.BASELINES:
        make_store(folder / ctl.store_name(name, fixes), CONTROL_T0, orders=4, products=4, mcp=3)
    make_store(folder / ctl.store_name(T01, fixes), CONTROL_T0, orders=4, products=4, mcp=3, order_child=True)
    make_store(folder / ctl.store_name(T04, fixes), CONTROL_T0, orders=4, products=4, mcp=5, new_names=True)
    return run, folder, fixes


def _judge(world, drive=None, fixes=None):
    run, folder, all_fixes = world
    controls = ctl.Controls(folder, fixes or all_fixes)
    store = Store(run)
    return dc.Judge(controls, store, drive), store, controls


def _shows(world, sql: str, claimed, defect: str, direction: str | None, drive=None):
    judge, store, controls = _judge(world, drive)
    try:
        check = store.check(ci.Cited(sql, claimed))
        return judge.shows(check, defect, direction), judge
    finally:
        store.close()
        controls.close()


ABSENT = ("SELECT count(*) FROM spans s WHERE s.name = 'POST /orders' AND EXISTS (SELECT 1 FROM spans c WHERE "
          "c.parent_span_id = s.span_id AND c.attributes->>'$.\"db.system.name\"' = 'sqlite')")
RETIRED = "SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\"http.method\"' IS NOT NULL"


def test_the_named_defects_control_in_the_claimed_direction(world):
    out, judge = _shows(world, ABSENT, 0, T01, "absent")
    assert out.shows, out.why
    assert judge.normalised and judge.mode.startswith("normalised")
    # The same query under a claim about another defect: T04's control reads it as the run does.
    out, _ = _shows(world, ABSENT, 0, T04, "absent")
    assert not out.shows and "does not read differently" in out.why
    # Retired names: 30 on the run (3 per request at the controls' scale), none with T04 fixed.
    out, _ = _shows(world, RETIRED, 30, T04, "higher")
    assert out.shows, out.why


@pytest.mark.parametrize(("sql", "claimed", "defect", "direction"), [
    (ABSENT, 0, T01, "present"),  # an inverted claim: "POST /orders DO get their child"
    (ABSENT, 0, T01, "higher"),
    (RETIRED, 30, T04, "lower"),  # "shop-mcp under-reports http.method"
])
def test_an_inverted_claim_over_a_switch_is_the_keys_to_refuse(world, sql, claimed, defect, direction):
    """A reading that switches the thing off or on (0 one side) may count the thing or what lacks it
    (issue 59: POST /orders spans *without* a child read high where the child is absent), so the
    judge takes it either way; the inverted direction is refused by the key's claims, which
    accept only the defect's own directions."""
    from harness.telemetry import claims as cm
    from harness.verdicts.key import load_key

    out, _ = _shows(world, sql, claimed, defect, direction)
    assert out.shows, out.why
    mission = Path(__file__).resolve().parents[1] / "missions" / "observability"
    vocab = cm.load_vocabulary(mission)
    d = next(k for k in load_key(mission / "key" / "defects.yaml", vocab) if k.id == defect)
    kind = d.claims[0].kind
    assert cm.matches(cm.record_claim(kind, direction, d.claims[0].service, vocab), d.claims, d.scope) is None


def test_a_plain_count_after_a_long_drive_is_compared_per_request(world):
    # 40+40+40 shop-api spans against 4+4+4 (+4 with T01 fixed): raw, 120 vs 16 "differs";
    # per request driven it reads 12 vs 16, within noise.
    out, _ = _shows(world, "SELECT count(*) FROM spans WHERE service = 'shop-api'", 120, T01, None)
    assert not out.shows and "does not read differently" in out.why


def test_a_query_that_moves_with_another_fix_as_far_does_not_single_it_out(world):
    # Spans with a sqlite child OR the current http names: +4 with T01 fixed, +5 with T04 fixed.
    both = ("SELECT count(*) FROM spans WHERE attributes->>'$.\"db.system.name\"' = 'sqlite' "
            "OR attributes->>'$.\"http.request.method\"' IS NOT NULL")
    out, _ = _shows(world, both, 40, T01, "lower")
    assert not out.shows and "moves the same way with another planted defect fixed" in out.why, out.why
    assert T04 not in out.why and T01 not in out.why  # no key id in any reason


def test_time_filters_are_mapped_onto_each_stores_clock(world):
    # Filtered on now() and on an absolute time the agent saw: on a store driven days earlier,
    # unmapped, both would read nothing (0 "with the fix"); mapped, the control shows its children.
    recent = ABSENT.replace("WHERE s.name", "WHERE s.start_ns > epoch_ns(now() - INTERVAL 1 DAY) AND s.name")
    out, _ = _shows(world, recent, 0, T01, "absent")
    assert out.shows, out.why
    absolute = ABSENT.replace("WHERE s.name", f"WHERE s.start_ns >= {RUN_T0} AND s.name")
    out, _ = _shows(world, absolute, 0, T01, "absent")
    assert out.shows, out.why
    # A time filter that reads nothing anywhere is no difference at all.
    future = ABSENT.replace("WHERE s.name", "WHERE s.start_ns > epoch_ns(now() + INTERVAL 1 DAY) AND s.name")
    out, _ = _shows(world, future.replace("EXISTS", "NOT EXISTS"), 0, T01, "absent")
    assert not out.shows


def test_a_drive_like_the_controls_is_compared_as_read(world):
    judge, store, controls = _judge(world, {"duration": 10, "vus": 2, "drives": 1})
    assert not judge.normalised and judge.mode.startswith("drive-matched")
    store.close()
    controls.close()
    from harness.verdicts.drive import run_drive

    assert run_drive(Path("/nonexistent")) is None


def test_a_missing_control_is_a_named_refusal(world, tmp_path):
    from harness.verdicts.accused import Accused
    from harness.verdicts.key import Defect
    from harness.verdicts.keymatch import defect_problems

    _, folder, fixes = world
    judge, store, controls = _judge(world, fixes={**fixes, "B01-order-ref-count-collision": [ctl.Fix("c.py", "x", "y")]})
    try:
        check = store.check(ci.Cited(ABSENT, 0))
        d = Defect(id="B01-order-ref-count-collision", kind="Behavior", description="", file="", function="",
                   evidence=[])
        problems, used, _ = defect_problems(d, [check], Accused(), None, {0}, judge)
        assert used is None and "control store of the defect it names is missing" in problems[0]
    finally:
        store.close()
        controls.close()


def test_each_query_has_one_budget_across_all_stores(world, monkeypatch):
    judge, store, controls = _judge(world)
    try:
        check = store.check(ci.Cited(ABSENT, 0))
        assert check.ok, check.why
        # The budget ends where the run's store's reading did: nothing is left for the controls.
        # (Set after the run's reading, which reads the same constant: 0 s there would interrupt
        # it after 10 ms, and a loaded box then fails it for the wrong reason.)
        monkeypatch.setattr(dc, "QUERY_BUDGET_S", check.spent_s)
        out = judge.shows(check, T01, "absent")
        assert not out.shows and "budget" in out.why, out.why
    finally:
        store.close()
        controls.close()


def test_a_large_result_is_capped_not_held_in_memory(world):
    run, _, _ = world
    con = ev.open_store(run)
    try:
        check = ev.rerun(con, ci.Cited("SELECT repeat(name, 50000) FROM spans", None))
    finally:
        con.close()
    assert not check.ok and "MB read back" in str(check.result)


def test_readings_take_the_quoted_column():
    check = ev.QueryCheck(ci.Cited("SELECT 1", 40.0), ok=True, result="1 rows", rows=1, first_row=[3.0, 40.0])
    assert ev.reading(check) == (40.0, ("cell", 1))
    assert ev.reading(ev.QueryCheck(ci.Cited("x", None), rows=1, first_row=[None, 7.0])) == (7.0, ("cell", 1))
    assert ev.reading(ev.QueryCheck(ci.Cited("x", None), rows=5, first_row=[1.0]))[0] == 5.0


def test_now_on_the_run_store_is_the_runs_own_last_instant(world):
    # Ruled a year after the run, `now() - INTERVAL 1 DAY` still means the day the run had.
    run, _, _ = world
    store = Store(run)
    try:
        check = store.check(ci.Cited("SELECT count(*) FROM spans WHERE start_ns > epoch_ns(now() - INTERVAL 1 DAY)", 150))
    finally:
        store.close()
    assert check.ok and check.result == 150, check.why


def test_controls_driven_as_the_run_was_are_preferred_and_said(world, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMS_BENCHMARK_CACHE", str(tmp_path / "cache"))
    mission = Path(__file__).resolve().parents[1] / "missions" / "observability"
    long = {"duration": 120, "vus": 5}
    assert ctl.controls_dir(mission, long) != ctl.controls_dir(mission) == ctl.controls_dir(mission, ctl.DRIVE)
    assert ctl.Controls.for_mission(mission, long) is None  # none made on this (empty) cache
    for drive in (ctl.DRIVE, long):
        folder = ctl.controls_dir(mission, drive)
        folder.mkdir(parents=True)
        for b in ctl.BASELINES:
            (folder / f"{b}.duckdb").write_bytes(b"")
    # A set whose stores were never checked against the key when built is not used (issue 64).
    assert ctl.Controls.for_mission(mission, long) is None
    for drive in (ctl.DRIVE, long):
        folder = ctl.controls_dir(mission, drive)
        (folder / "manifest.json").write_text(json.dumps({"stores": {
            b: {"file": f"{b}.duckdb", "check": ctl.CHECK_VERSION} for b in ctl.BASELINES}}))
    found = ctl.Controls.for_mission(mission, long)
    assert found.folder == ctl.controls_dir(mission, long) and found.drive == long
    assert ctl.Controls.for_mission(mission, {"duration": 60, "vus": 3}).drive == ctl.DRIVE  # no such set: short mode
    # The judge says which mode it compared in.
    run, folder, fixes = world
    store = Store(run)
    try:
        judge = dc.Judge(ctl.Controls(folder, fixes, long), store, {**long, "drives": 1})
        assert not judge.normalised and "120 s × 5 users" in judge.mode
    finally:
        store.close()
