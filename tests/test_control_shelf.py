"""The control stores of a set, read through one confined DuckDB (`controls._Shelf`): each store's
connection reads that store, aligned onto the run's clock, and nothing a cited query can say reaches
another store's data, the host's files, or the configuration."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from harness.telemetry.readonly import BadRequest, check_read_only
from harness.verdicts import controls as ctl
from harness.verdicts.evidence import _ReadOnlyClient, open_store
from harness.verdicts.timeshift import store_clock

S = 1_000_000_000
RUN_START = 1_796_000_000 * S


def _store(path: Path, start_ns: int, spans: int, name: str) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE spans (name VARCHAR, start_ns BIGINT, end_ns BIGINT)")
        con.executemany("INSERT INTO spans VALUES (?, ?, ?)",
                        [(name, start_ns + i * S, start_ns + i * S + 5_000_000) for i in range(spans)])


@pytest.fixture
def shelf_set(tmp_path: Path):
    """A run store and a set of two baselines and one fix's control, each with a span count of its own,
    driven three days before the run."""
    folder = tmp_path / "controls"
    folder.mkdir()
    fixes = {"T01-x": []}
    counts = {"baseline-1": 3, "baseline-2": 4, "T01-x": 5}
    for name, n in counts.items():
        _store(folder / ctl.store_name(name, fixes), RUN_START - 3 * 86_400 * S, n, name)
    run = tmp_path / "run.duckdb"
    _store(run, RUN_START, 10, "run")
    with duckdb.connect(str(run), read_only=True) as con:
        clock = store_clock(con)
    controls = ctl.Controls(folder, fixes)
    yield controls, clock, counts, run
    controls.close()


def test_each_stores_connection_reads_that_store_on_the_runs_clock(shelf_set):
    controls, clock, counts, _ = shelf_set
    for name, n in counts.items():
        con = controls.connection(name, align=clock)
        assert con.execute("SELECT count(*), min(name), max(name) FROM spans").fetchone() == (n, name, name)
        first = con.execute("SELECT min(start_ns) FROM spans").fetchone()[0]
        assert first == clock.start_ns  # laid onto the run's timeline, not three days before
        # A cited query runs on a cursor of its own: it reads the same store.
        cur = con.cursor()
        try:
            assert cur.execute("SELECT count(*) FROM spans").fetchone()[0] == n
        finally:
            cur.close()
    assert len(controls._cons) == 1  # one DuckDB for the whole set and this clock


def test_the_judges_re_run_reads_each_store_alone(shelf_set):
    controls, clock, counts, _ = shelf_set
    for name, n in counts.items():
        got = _ReadOnlyClient(controls.connection(name, align=clock)).sql("SELECT count(*) AS n FROM spans")
        assert got.rows == [[n]]


def test_no_cited_query_leaves_its_store(shelf_set):
    """What a query could try on a shared connection: set its path to another store's views, name
    another store's schema or its attached catalog, read a host file, unlock the configuration."""
    controls, clock, _, run = shelf_set
    con = controls.connection("baseline-1", align=clock)
    for statement in ("SET search_path = 'memory._views_1'", "USE memory._views_2",
                      "SET enable_external_access = true", "ATTACH '/etc/hostname' AS h"):
        with pytest.raises(BadRequest):
            check_read_only(statement)  # only a lone SELECT is ever re-run
    # Naming another store reads it here, but the same query fails on the run's own store, and a
    # cited query that does not read on the run is no evidence at all (`prefetch` reads only `ok` ones).
    other = "SELECT count(*) FROM _views_2.spans"
    assert con.execute(other).fetchone()[0] == 5
    with open_store(run) as own, pytest.raises(duckdb.Error):
        own.execute(other).fetchall()
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        con.execute("SELECT * FROM read_text('/etc/hostname')").fetchall()
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO _control_0.main.spans VALUES ('x', 1, 2)")  # attached read-only


def test_a_store_not_in_the_set_is_no_connection(shelf_set):
    controls, clock, _, _ = shelf_set
    with pytest.raises(KeyError):
        controls.connection("P09-not-a-defect", align=clock)
