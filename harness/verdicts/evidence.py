"""A finding's own evidence: the queries its Evidence cell cites, re-run on the run's store.

The key-matcher only maps a finding to planted defects; whether the finding holds up is
decided on what the finding itself cites (the benchmark's rule: a finding is confirmed
only when its own cited telemetry re-runs to the claimed effect and the accused code
shows it). This module:

- extracts the cited queries: `obs ...` commands and SQL (`SELECT` / `WITH`), in
  backticks or bare, each with the number the finding quotes for it ("→ 12", "returned 0");
- reads every SQL text with DuckDB's own parser (`sqlread`, never regexes): comments are
  not part of a query; tables and literals come off the parse tree; a query that calls a
  table function or reads anything but the store's four tables is refused before it runs;
- re-runs each on the run's DuckDB file on a confined connection (`open_store`: read-only,
  external access off, extensions neither installed nor loaded, the configuration locked),
  each query interrupted after QUERY_LIMIT_S, at most ROW_CAP rows fetched, at most MAX_CITED
  queries per finding, through `obs`'s own query builders for `obs` commands (`--since` is
  dropped: "the last 5 minutes" of a finished run is no window); an error's text is cut to
  its first line with the store's and the host's paths taken out;
- judges whether the result supports the claim (non-empty; a single number non-zero,
  unless the finding claims 0; a quoted number within TOLERANCE), and whether a query that
  re-ran to its claim is *evidence* at all: it must read a telemetry table and measure it
  (a select list that reads a column or counts rows, not a constant; not the claimed number
  written into its own select list), and an absence (0 / nothing) is evidence only against a
  control store where the thing is present (`keymatch.Discriminator`);
- says which tables and identifying literals (names, attribute keys; not service names,
  kinds or statuses) the query touched;
- the code a finding accuses is found in `accused`.
"""

from __future__ import annotations

import contextlib
import decimal
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.telemetry import obs, obs_store
from harness.telemetry import sqlread
from harness.verdicts.cited import Cited, is_sql

SIGNAL_TABLES = sqlread.SIGNAL_TABLES
TOLERANCE_REL, TOLERANCE_ABS = 0.5, 2.0  # a quoted number holds within ±50 % or ±2, whichever is wider
# Literals that say nothing about which defect a query looks at (kinds, statuses, numbers).
_GENERIC = {"server", "client", "internal", "producer", "consumer", "error", "ok", "unset", "sum", "gauge",
            "histogram", "true", "false", ""}
_JSON_KEY = re.compile(r'\$\."([^"]+)"')


@dataclass
class QueryCheck:
    cited: Cited
    ok: bool = False  # the re-run supports the claim
    result: Any = None  # a single value, "N rows", or an error text
    why: str = ""  # when not ok: why, in words
    tables: set[str] = field(default_factory=set)
    literals: set[str] = field(default_factory=set)  # lower-cased, `%` stripped; attribute keys included
    values: list[float] = field(default_factory=list)  # the numbers the re-run gave (a single value, a row count)
    evidence: bool = False  # it re-ran to its claim AND measures the telemetry (not a constant, not an absence)
    not_evidence: str = ""  # when it re-ran to its claim but is not evidence: why
    absence: bool = False  # it measures, and claims (or shows) an absence: evidence only against a control
    constant_claim: bool = False  # the number it claims is also written in its select list (see _classify)
    rows: int = 0  # rows the re-run returned
    first_row: list[float | None] = field(default_factory=list)  # the first row's numeric cells (None: not numeric)
    scales: bool = False  # its reading grows with the traffic driven (a count or a sum, or a row count)
    spent_s: float = 0.0  # seconds its re-run on the run's store took (the query's budget counts it)
    sql_run: list[str] = field(default_factory=list)  # the SQL it ran, as written (an `obs` command's, built)
    raw_literals: set[str] = field(default_factory=set)  # its string literals as written, service names left out


# --- re-running -------------------------------------------------------------------------

QUERY_LIMIT_S = 10.0  # a cited query running longer is interrupted (not evidence)
ROW_CAP = 50_000  # rows fetched of one cited query
MAX_CITED = 10  # cited queries re-run per finding; a finding citing more does not hold up
BYTE_CAP = 4_000_000  # bytes of one cited query's result read back; a larger result is not evidence
FETCH_ROWS = 256  # rows fetched at a time, so that the byte cap is checked as the result comes
_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
           "autoload_known_extensions": False, "memory_limit": "160MB", "threads": 2,
           "lock_configuration": True}  # locked last: nothing a query does can turn these back


def open_store(path: Path):
    """The run's store, read-only, confined: no files, no network, no extensions, the
    configuration locked (as the agent's query endpoint is)."""
    import duckdb

    return duckdb.connect(str(path), read_only=True, config=dict(_CONFIG))


def _scrub(text: str, hide: tuple[str, ...]) -> str:
    """An error's first line, without the store's path or the host's home: what a rulings file may carry."""
    line = text.strip().splitlines()[0] if text and text.strip() else "error"
    for h in hide:
        if h and len(h) > 1:
            line = line.replace(h, "<host path>")
    return line[:240]


class _ReadOnlyClient:
    """`obs`'s Client, answered from the run's store (a confined read-only DuckDB
    connection); refuses, before running it, any SQL the parser shows reads something other
    than the telemetry; keeps every statement it ran, and whether each was a measurement."""

    def __init__(self, con, hide: tuple[str, ...] = (), limit_s: float = QUERY_LIMIT_S, rewrite=None) -> None:
        self.con = con
        self.hide = hide
        self.limit_s = limit_s
        self.rewrite = rewrite  # the store's clock for the query's time filters (`timeshift.mapped`)
        self.issued: list[str] = []
        self.shapes: list[sqlread.Shape] = []

    def sql(self, sql: str, limit: int = 1000) -> obs_store.Result:
        import threading

        import duckdb

        from harness.telemetry.readonly import BadRequest, check_read_only, run_select

        try:
            check_read_only(sql)
        except BadRequest as exc:
            raise obs_store.QueryFailed(_scrub(str(exc), self.hide)) from None
        shape = sqlread.parse(sql)
        refused = sqlread.refusal(shape)
        if refused:
            raise obs_store.QueryFailed(f"not re-run: {refused}")
        if self.rewrite is not None:
            sql = self.rewrite(sql)
        self.issued.append(sql)
        self.shapes.append(shape)
        limit = min(limit, ROW_CAP)
        cur = self.con.cursor()
        timer = threading.Timer(self.limit_s, cur.interrupt)
        timer.start()
        try:
            columns, result = run_select(cur, sql)
            rows, size = [], 0
            while len(rows) <= limit:
                chunk = result.fetchmany(min(FETCH_ROWS, limit + 1 - len(rows)))
                if not chunk:
                    break
                size += sum(_size(v) for r in chunk for v in r)
                if size > BYTE_CAP:
                    raise obs_store.QueryFailed(f"its result is over the {BYTE_CAP // 1_000_000} MB read back "
                                                f"of one cited query")
                rows += chunk
        except obs_store.QueryFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - DuckDB's errors are the query's, recorded not raised
            if isinstance(exc, duckdb.InterruptException):
                raise obs_store.QueryFailed(f"it ran over {self.limit_s:g} s and was stopped") from None
            raise obs_store.QueryFailed(_scrub(str(exc), self.hide) or type(exc).__name__) from None
        finally:
            timer.cancel()
            cur.close()
        return obs_store.Result(list(columns), [[_plain(v) for v in r] for r in rows[:limit]], len(rows) > limit)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, bytearray)) else 16 if not isinstance(value, (list, dict)) \
        else len(str(value))


def _plain(value: Any) -> Any:
    return float(value) if isinstance(value, decimal.Decimal) else value


def _argv(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes: a model's escaping; try without the backslashes
        return shlex.split(text.replace('\\"', '"'))


def within(claimed: float, got: float) -> bool:
    return abs(got - claimed) <= max(TOLERANCE_ABS, TOLERANCE_REL * abs(claimed))


_within = within


def _number(value: Any) -> float | None:
    if value is None:
        return 0.0  # NULL reads 0, as the key's expectations read it
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _numbers_in(lines: list[str]) -> list[float]:
    """Numbers printed as whole tokens (`12`, `40.0`, `8.5ms`, `93%`), not inside times or ids."""
    out = []
    for line in lines:
        for token in line.split():
            m = re.fullmatch(r"[-+]?(\d+(?:\.\d+)?)(?:ms|s|%)?[,)]?", token.strip("(,"))
            if m:
                out.append(float(m.group(1)))
    return out


ABSENCE_NOT_EVIDENCE = ("it claims an absence (0 / nothing), which holds only where the defect's control store "
                        "shows the thing present, and this mission has no control stores yet")


def _judge(run: QueryCheck, rows: list[list[Any]], numbers: list[float]) -> None:
    claimed = run.cited.claimed
    run.rows = len(rows)
    run.first_row = [_number(v) if v is not None else 0.0 for v in rows[0]] if rows else []
    run.values = [float(len(rows)), *numbers[:1000]]
    if not rows:
        run.result = "0 rows"
        run.ok = claimed == 0
        run.why = "" if run.ok else ("the cited query returned no rows" + (
            f" where the finding claims {_fmt(claimed)}" if claimed is not None else ""))
        return
    single = _number(rows[0][0]) if len(rows) == 1 and len(rows[0]) == 1 else None
    if single is not None:
        run.result = int(single) if single.is_integer() else single
        run.values = [single]
        if claimed is not None:
            run.ok = _within(claimed, single)
            run.why = "" if run.ok else \
                f"the cited query returned {_fmt(single)} where the finding claims {_fmt(claimed)}"
        else:
            run.ok = single != 0
            run.why = "" if run.ok else "the cited query returned 0"
        return
    run.result = f"{len(rows)} rows"
    if claimed is None:
        run.ok = True
    elif claimed == 0:
        run.ok, run.why = False, f"the cited query returned {len(rows)} rows where the finding claims none"
    else:
        run.ok = any(_within(claimed, n) for n in [float(len(rows)), *numbers])
        run.why = "" if run.ok else f"the cited query returned {len(rows)} rows, none near the {_fmt(claimed)} claimed"


def reading(check: QueryCheck, mode: tuple | None = None) -> tuple[float | None, tuple]:
    """The one number a re-run is compared on, and how it was taken: ("cell", j) the first row's
    column j (the column whose value the finding quotes, else the first numeric one) when the run
    returned one row; ("rows",) the row count otherwise. `mode`: take it as the run's was taken."""
    if str(check.result).startswith(("error", "not re-run")):
        return None, mode or ("rows",)
    if mode is None:
        numeric = [j for j, v in enumerate(check.first_row) if v is not None]
        if check.rows == 1 and numeric:
            claimed = check.cited.claimed
            near = [j for j in numeric if claimed is not None and within(claimed, check.first_row[j])]
            mode = ("cell", (near or numeric)[0])
        else:
            mode = ("rows",)
    if mode[0] == "rows":
        return float(check.rows), mode
    if check.rows == 0:
        return 0.0, mode
    if check.rows > 1 or mode[1] >= len(check.first_row):
        return None, mode
    return check.first_row[mode[1]], mode


def _classify(run: QueryCheck, shapes: list[sqlread.Shape]) -> None:
    """Whether a query that re-ran to its claim is evidence at all."""
    if not run.ok:
        return
    reasons = [sqlread.not_a_measurement(s) for s in shapes] or ["it ran no query on the store"]
    if all(reasons):
        run.not_evidence = reasons[0]
        return
    claimed = run.cited.claimed
    # A reading equal to a number in the select list (`round(x, 2)` reading 2) may be honest: against
    # the control stores a constant never moves, so it is refused there by the readings themselves;
    # without them, `reads_defect` refuses it (no literal turns a check off, none turns one on).
    run.constant_claim = claimed is not None and claimed != 0 and any(claimed in s.select_numbers for s in shapes)
    if claimed == 0 or (claimed is None and not any(v for v in run.values)):
        run.not_evidence, run.absence = ABSENCE_NOT_EVIDENCE, True
        return
    run.evidence = True


_QUERY_COMMANDS = {obs.traces_search, obs.traces_get, obs.logs_search, obs.profiles_top, obs.sql_cmd,
                   obs.metrics_list, obs.metrics_query}


def rerun(con, cited: Cited, hide: tuple[str, ...] = (), limit_s: float = QUERY_LIMIT_S,
          rewrite=None) -> QueryCheck:
    """Re-run one cited query on a confined read-only connection (its time filters moved onto
    the store's clock by `rewrite`); never raises."""
    run = QueryCheck(cited)
    client = _ReadOnlyClient(con, hide, max(limit_s, 0.01), rewrite)
    try:
        if is_sql(cited.text):
            res = client.sql(cited.text, limit=ROW_CAP)
            _judge(run, res.rows, [n for r in res.rows for v in r if (n := _number(v)) is not None and v is not None])
        else:
            argv = _argv(cited.text)[1:]
            with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
                try:
                    args = obs.build_parser().parse_args(argv)
                except SystemExit:
                    raise obs_store.QueryFailed("not a command obs accepts: " + (err.getvalue().strip().splitlines()
                                                                         or ["bad arguments"])[-1]) from None
            if args.func not in _QUERY_COMMANDS:  # `obs drive`, `obs finding ...`: not a reading of the store
                raise obs_store.QueryFailed("not a query: only `obs traces|metrics|logs|profiles|sql` read the store")
            if getattr(args, "since", None) is not None:
                args.since = None  # relative to now: no window once the run is over
            if args.func is obs.sql_cmd:
                res = client.sql(args.query, limit=ROW_CAP)
                _judge(run, res.rows, [n for r in res.rows for v in r
                                       if v is not None and (n := _number(v)) is not None])
            else:
                out = args.func(client, args)
                rows = [[line] for line in out.lines[:out.rows]] if out.rows else []
                _judge(run, rows, _numbers_in(out.lines))
    except (obs_store.QueryFailed, ValueError) as exc:
        run.ok, run.result = False, f"error: {exc}"
        run.why = f"the cited query could not be re-run ({exc})"
    except Exception as exc:  # noqa: BLE001 - an obs formatter meeting odd data: the query's problem
        run.ok, run.result = False, f"error: {type(exc).__name__}"
        run.why = f"the cited query could not be re-run ({type(exc).__name__})"
    for shape in client.shapes:
        run.tables |= shape.signal_tables
        run.literals |= _identifying(shape)
        run.raw_literals |= shape.literals - shape.service_literals
        run.sql_run.append(shape.sql)
    # A count or a sum grows with the traffic driven; a max, a ratio or a distinct count does not.
    run.scales = run.rows != 1 or any(shape.select_aggregates and shape.select_aggregates <= sqlread.SCALING
                                      for shape in client.shapes[-1:])
    _classify(run, client.shapes)
    return run


# --- what a query looks at --------------------------------------------------------------

def _identifying(shape: sqlread.Shape) -> set[str]:
    out: set[str] = set()
    for text in shape.literals - shape.service_literals:
        keys = _JSON_KEY.findall(text)
        if keys:
            out |= {k.lower() for k in keys}
            continue
        value = text.strip("%").strip().lower()
        if value in _GENERIC or re.fullmatch(r"[-+\d.]+", value):
            continue
        out.add(value)
    return out


def literals_of(sql: str) -> set[str]:
    """The identifying literals of a query, read off DuckDB's parse tree: string literals
    (lower-cased, LIKE's `%` stripped) and the attribute keys of its JSON paths; service names
    (literals compared with a `service` column), kinds, statuses and numbers left out.
    Comments are not part of a query: the parser drops them."""
    return _identifying(sqlread.parse(sql or ""))


def tables_of(sql: str) -> set[str]:
    """The telemetry tables a query reads, from its parse tree (CTE names resolved away)."""
    return sqlread.parse(sql or "").signal_tables


def literals_meet(mine: set[str], theirs: set[str]) -> set[str]:
    """Literals two queries share: equal, or one inside the other when the shorter has 4+ characters."""
    shared = set()
    for a in mine:
        for b in theirs:
            short, long_ = sorted((a, b), key=len)
            if a == b or (len(short) >= 4 and short in long_):
                shared.add(b)
    return shared
