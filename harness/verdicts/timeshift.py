"""A cited query's time filters, on every store it is re-run on: the stores' clocks, not the query.

An agent filters on `now() - INTERVAL 10 MINUTE` or on the absolute times it saw, in any form
DuckDB reads (epoch nanoseconds or seconds, `epoch_ns(...)`, `TIMESTAMP '...'`, `'...'::DATE`,
`make_timestamp(...)`, arithmetic over them). Re-run later, or on a control store driven days
before, such a filter reads nothing, and "nothing" then differs from every control. Rewriting
the filters means recognising every form (issue 48 found forms a rewrite skipped, each a way to
make the run differ from its controls); so nothing in the query is rewritten but the clock:

- a control store is opened with its timeline laid onto the run's (`aligned`): each `*_ns`
  column of its tables is read through a view that maps the store's [first, last] instant onto
  the run's, affinely, so a filter on the run's last quarter reads the control's last quarter
  whatever the two drives' lengths (a span keeps its own duration: `end_ns` moves with its
  `start_ns`). Absolute times the agent wrote then mean the same moment of the drive on every
  store;
- `now()` (and `current_timestamp`, `get_current_timestamp()`, `transaction_timestamp()`,
  `localtimestamp`, `current_date`, `today()`) becomes the run's last recorded instant on every
  store (`mapped`), found with DuckDB's own tokenizer (`duckdb.tokenize`): a `now()` inside a
  string or a comment is not touched, and a column or alias named `now` is not the clock.

Span events' `time_ns`, inside the `events` JSON, keep the store's own clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.telemetry import sqlread

_NOW_CALLS = {"now", "get_current_timestamp", "transaction_timestamp"}
_NOW_WORDS = {"current_timestamp", "localtimestamp"}
_DATE_CALLS = {"today"}
_DATE_WORDS = {"current_date"}
_ALIAS = "_aligned_store"  # the attached control store; queries read the views of the same names
_INTEGERS = {"BIGINT", "HUGEINT", "UBIGINT", "INTEGER"}


@dataclass(frozen=True)
class Clock:
    """Where a store's records lie: its first and last instant (ns since the epoch)."""

    start_ns: int
    end_ns: int


def store_clock(con, catalog: str | None = None) -> Clock | None:
    table = f"{catalog}.main.spans" if catalog else "spans"
    try:
        row = con.execute(f"SELECT min(start_ns), max(end_ns) FROM {table}").fetchone()
    except Exception:  # noqa: BLE001 - a store without spans has no clock; its queries run unmapped
        return None
    if not row or row[0] is None or row[1] is None:
        return None
    return Clock(int(row[0]), int(row[1]))


def _column(name: str, table: str, columns: set[str], store: Clock, run: Clock) -> str:
    """The SQL that reads `name` on the run's timeline (the column's own name kept)."""
    span = max(store.end_ns - store.start_ns, 1)
    ratio = (run.end_ns - run.start_ns) / span

    def moved(col: str) -> str:
        return f"({run.start_ns} + CAST(round(({col} - {store.start_ns}) * {ratio!r}) AS BIGINT))"

    if table == "spans" and name == "end_ns" and "start_ns" in columns:
        return f"{moved('start_ns')} + (end_ns - start_ns) AS end_ns"  # the span keeps its duration
    return f"{moved(name)} AS {name}"


def lay_views(con, catalog: str, run: Clock | None, schema: str | None = None) -> None:
    """Views named as the signal tables of the attached `catalog` (in `schema`, else the default one),
    its timeline laid onto `run`'s; read as they are without a run clock or a store clock."""
    store = store_clock(con, catalog) if run is not None else None
    rows = con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                       "WHERE table_catalog = ? AND table_schema = 'main' ORDER BY table_name, ordinal_position",
                       [catalog]).fetchall()
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        if table in sqlread.SIGNAL_TABLES:
            tables.setdefault(table, []).append((column, kind))
    where = f'"{schema}".' if schema else ""
    for table, cols in tables.items():
        names = {c for c, _ in cols}
        moved = [c for c, kind in cols if c.endswith("_ns") and kind.upper() in _INTEGERS]
        if store is None or not moved:
            select = f"SELECT * FROM {catalog}.main.{table}"
        else:
            replace = ", ".join(_column(c, table, names, store, run) for c in moved)
            select = f"SELECT * REPLACE ({replace}) FROM {catalog}.main.{table}"
        con.execute(f'CREATE VIEW {where}"{table}" AS {select}')


def confine(con, config: dict) -> None:
    """External access off and the configuration locked, once the views exist (`config` says which)."""
    if config.get("enable_external_access") is False:
        con.execute("SET enable_external_access = false")
    if config.get("lock_configuration"):
        con.execute("SET lock_configuration = true")


def open_config(config: dict) -> dict:
    """What an in-memory DuckDB that attaches stores is opened with: `config` but what `confine` sets last."""
    return {k: v for k, v in config.items() if k not in ("enable_external_access", "lock_configuration")}


def aligned(path: Path, run: Clock | None, config: dict):
    """The store at `path`, read-only and confined by `config` (external access off and the
    configuration locked once the views exist), its timeline laid onto `run`'s. Without a run
    clock or a store clock it is opened as it is."""
    import duckdb

    con = duckdb.connect(":memory:", config=open_config(config))
    try:
        con.execute(f"ATTACH ? AS {_ALIAS} (READ_ONLY)", [str(path)])
        lay_views(con, _ALIAS, run)
        confine(con, config)
    except Exception:
        con.close()
        raise
    return con


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")


def mapped(sql: str, run: Clock) -> str:
    """`sql` with its clock calls read as the run's last recorded instant (unchanged where it has none)."""
    import duckdb

    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - what does not tokenize is left to the parser to refuse
        return sql
    bounds = [(pos, tokens[i + 1][0] if i + 1 < len(tokens) else len(sql), kind) for i, (pos, kind) in enumerate(tokens)]
    when = _iso(run.end_ns)
    out, last, i = [], 0, 0
    while i < len(bounds):
        pos, end, kind = bounds[i]
        word = sql[pos:end].rstrip()
        name = kind.name if hasattr(kind, "name") else str(kind)
        low = word.lower()
        calls, words = _NOW_CALLS | _DATE_CALLS, _NOW_WORDS | _DATE_WORDS
        if name in ("identifier", "keyword") and low in calls | words:
            # now() / today(): the call's parentheses go with it.
            stop: int | None = pos + len(word)
            if i + 2 < len(bounds) and sql[bounds[i + 1][0]:bounds[i + 1][1]].strip() == "(" \
                    and sql[bounds[i + 2][0]:bounds[i + 2][1]].strip().startswith(")"):
                stop = bounds[i + 2][0] + 1
                i += 2
            elif low in calls:
                stop = None  # a column or alias named `now`: not the clock
            if stop is not None:
                literal = f"DATE '{when[:10]}'" if low in _DATE_CALLS | _DATE_WORDS else f"TIMESTAMPTZ '{when}'"
                out.append(sql[last:pos] + literal)
                last = stop
        i += 1
    out.append(sql[last:])
    return "".join(out)
