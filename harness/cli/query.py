"""`llms-benchmark query RUN OBS-COMMAND...`: read a finished run's telemetry store the way the
agent did, with `obs`'s own query commands (`traces search`, `metrics query`, `logs search`,
`profiles top`, `sql "SELECT ..."`), answered from `telemetry.duckdb` opened read-only and
confined as the evidence re-runs open it (no files, no network, one SELECT at a time). No DuckDB
CLI needed, and nothing the query does can change the store."""

from __future__ import annotations

import contextlib
import io
import json
import re

import typer

from harness.cli.common import err, out, project_root, user_errors
from harness.errors import UserError

SQL_START = re.compile(r"\s*(select|with|from|describe|show|summarize)\b", re.I)
FIX = ('give an obs query command: traces search|get, metrics list|query, logs search, profiles top, '
       'or sql "SELECT ..."  (e.g. llms-benchmark query RUN sql "SELECT count(*) FROM spans")')


def _store(run: str):
    from harness.records.paths import ProjectPaths

    paths = ProjectPaths(project_root())
    if not run or "/" in run or run in (".", ".."):
        raise UserError(f"{run[:120]!r} is not a run id", field="RUN", fix="pass the run id `launch` printed")
    for folder in (paths.runs, paths.inconclusive, paths.refused):
        store = folder / run / "telemetry.duckdb"
        if store.is_file():
            return store
    raise UserError(f"run {run!r} has no telemetry store (telemetry.duckdb) under runs/, inconclusive/ or refused/",
                    file=paths.runs / run, field="RUN", fix="only a run of a mission with telemetry (observability) "
                                                            "that reached its mission has one")


@user_errors
def query(ctx: typer.Context, run: str, as_json: bool = typer.Option(
        False, "--json", help="Print the command's lines (or, for sql, its columns and rows) as JSON.")) -> None:
    """Run an obs query (traces, metrics, logs, profiles, sql) on a finished run's telemetry store, read-only."""
    from harness.telemetry import obs
    from harness.telemetry.obs_store import QueryFailed
    from harness.verdicts.evidence import _QUERY_COMMANDS, _ReadOnlyClient, open_store

    argv = list(ctx.args)
    if argv[:1] == ["obs"]:
        argv = argv[1:]
    if len(argv) == 1 and SQL_START.match(argv[0]):
        argv = ["sql", argv[0]]
    if not argv:
        raise UserError("no query given", field="OBS-COMMAND", fix=FIX)
    with contextlib.redirect_stderr(io.StringIO()) as said, contextlib.redirect_stdout(io.StringIO()):
        try:
            args = obs.build_parser().parse_args(argv)
        except SystemExit:
            last = (said.getvalue().strip().splitlines() or ["bad arguments"])[-1]
            raise UserError(f"not a query obs accepts: {last}", field="OBS-COMMAND", fix=FIX) from None
    if getattr(args, "func", None) not in _QUERY_COMMANDS:
        raise UserError(f"`obs {' '.join(argv[:2])}` does not read the store", field="OBS-COMMAND", fix=FIX)
    if getattr(args, "since", None) is not None:
        err.print("--since is relative to now: the run is over, so it reads the whole store", highlight=False)
        args.since = None
    store = _store(run)
    con = open_store(store)
    try:
        client = _ReadOnlyClient(con, hide=(str(project_root()),))
        if args.func is obs.sql_cmd and as_json:
            res = client.sql(args.query, limit=args.limit)
            out.print_json(json.dumps({"columns": res.columns, "rows": res.rows, "truncated": res.truncated},
                                      default=str))
            return
        result = args.func(client, args)
    except QueryFailed as exc:
        raise UserError(f"the query failed: {exc}", file=store, field="OBS-COMMAND",
                        fix="a read-only SELECT on the store's tables (`sql \"SHOW TABLES\"` lists them)") from None
    finally:
        con.close()
    if as_json:
        out.print_json(json.dumps({"lines": result.lines, "rows": result.rows}))
    else:
        out.print("\n".join(result.lines), highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(query)
