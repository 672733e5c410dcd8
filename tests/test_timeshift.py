"""A cited query's time filter reads the same moment of the drive on the run's store and on a
control store driven days before for another length (issue 48: every form, none rewritten)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from harness.verdicts.evidence import _CONFIG
from harness.verdicts.timeshift import aligned, mapped, store_clock

S = 1_000_000_000
RUN_START = 1_796_000_000 * S  # 2026-11-30
CONTROL_START = RUN_START - 3 * 86_400 * S  # driven three days before


def _store(path: Path, start_ns: int, seconds: int, per_second: int) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE spans (name VARCHAR, start_ns BIGINT, end_ns BIGINT, duration_ms DOUBLE)")
        con.execute("CREATE TABLE metrics (name VARCHAR, time_ns BIGINT, start_ns BIGINT, value DOUBLE)")
        step = S // per_second
        rows = [("GET /x", start_ns + i * step, start_ns + i * step + 7_000_000, 7.0) for i in range(seconds * per_second)]
        con.executemany("INSERT INTO spans VALUES (?, ?, ?, ?)", rows)
        con.executemany("INSERT INTO metrics VALUES ('m', ?, ?, 1)", [(start_ns + i * S, start_ns) for i in range(seconds)])


@pytest.fixture
def stores(tmp_path: Path):
    run, control = tmp_path / "run.duckdb", tmp_path / "control.duckdb"
    _store(run, RUN_START, 120, 10)  # the default drive: 120 s
    _store(control, CONTROL_START, 10, 10)  # the short mode: 10 s, three days earlier
    with duckdb.connect(str(run), read_only=True) as con:
        clock = store_clock(con)
    return run, control, clock


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / S, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


# The run's last quarter (from 90 s on), in the forms an agent writes it.
Q = RUN_START + 90 * S
FORMS = {
    "epoch ns": f"start_ns >= {Q}",
    "epoch seconds, multiplied": f"start_ns >= {Q // S}::BIGINT * 1000000000",
    "epoch_ns of a timestamp literal": f"start_ns >= epoch_ns(TIMESTAMPTZ '{_iso(Q)}+00')",
    "a cast string": f"to_timestamp(start_ns / 1e9) >= '{_iso(Q)}+00'::TIMESTAMPTZ",
    "make_timestamp": f"make_timestamp(start_ns // 1000) >= make_timestamp({Q // 1000})",
    "now() minus an interval": "start_ns >= epoch_ns(now() - INTERVAL 30 SECOND)",
    "current_timestamp": "to_timestamp(start_ns / 1e9) >= current_timestamp - INTERVAL '30 seconds'",
}


@pytest.mark.parametrize("form", list(FORMS))
def test_a_time_filter_reads_the_same_share_of_each_drive(stores, form: str):
    run, control, clock = stores
    sql = mapped(f"SELECT count(*) FROM spans WHERE {FORMS[form]}", clock)
    with duckdb.connect(str(run), read_only=True) as con:
        on_run = con.execute(sql).fetchone()[0]
        total_run = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    con = aligned(control, clock, dict(_CONFIG))
    try:
        on_control = con.execute(sql).fetchone()[0]
        total_control = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    finally:
        con.close()
    assert 295 <= on_run <= 305, (form, on_run)  # the last 30 s of 120, 10 spans a second
    # The control's last quarter: the same share of its drive, though it is 10 s long and 3 days old.
    assert abs(on_control / total_control - on_run / total_run) <= 0.02, (form, on_control, total_control)
    assert on_control > 0


def test_unaligned_the_same_filter_reads_nothing_on_the_control(stores):
    """What the alignment prevents: an absolute filter on an old control reads 0 (a false absence)."""
    run, control, clock = stores
    with duckdb.connect(str(control), read_only=True) as con:
        assert con.execute(f"SELECT count(*) FROM spans WHERE {FORMS['epoch seconds, multiplied']}").fetchone()[0] == 0


def test_spans_keep_their_durations_and_metrics_their_points(stores):
    run, control, clock = stores
    con = aligned(control, clock, dict(_CONFIG))
    try:
        assert con.execute("SELECT min(end_ns - start_ns), max(end_ns - start_ns) FROM spans").fetchone() == (7_000_000, 7_000_000)
        first, last = con.execute("SELECT min(start_ns), max(end_ns) FROM spans").fetchone()
        assert first == clock.start_ns and clock.end_ns - 2 * S < last <= clock.end_ns  # laid onto the run's
        assert con.execute("SELECT count(*), min(time_ns) >= ? FROM metrics", [clock.start_ns]).fetchone() == (10, True)
    finally:
        con.close()


def test_an_aligned_store_stays_confined(stores):
    run, control, clock = stores
    con = aligned(control, clock, dict(_CONFIG))
    try:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute("SELECT * FROM read_text('/etc/hostname')").fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error):
            con.execute("INSERT INTO _aligned_store.main.spans VALUES ('x', 1, 2, 3)")  # attached read-only
    finally:
        con.close()


def test_only_the_clock_is_replaced(stores):
    _, _, clock = stores
    sql = "SELECT now, 'now()' AS s FROM (SELECT 1 AS now) -- now()\nWHERE today() IS NOT NULL AND now() > 0"
    out = mapped(sql, clock)
    assert out.startswith("SELECT now, 'now()' AS s FROM (SELECT 1 AS now) -- now()\n")
    assert "today()" not in out and "now()" not in out.split("\n")[1]
    assert f"DATE '{_iso(clock.end_ns)[:10]}'" in out
