"""`obs`: query the telemetry store of an observability mission.

    obs traces search [--service S] [--name SUBSTR] [--attr k=v ...] [--min-ms N]
                      [--max-ms N] [--status ERROR] [--kind SERVER] [--since 5m] [--limit 20]
    obs traces get TRACE_ID
    obs metrics list [--service S]
    obs metrics query NAME [--by label,...] [--agg sum|avg|max|min|rate|count|last|p50|p95|p99]
                      [--since 5m] [--service S]
    obs logs search [--service S] [--severity ERROR] [--text SUBSTR] [--trace ID]
                    [--attr k=v ...] [--since 5m] [--limit 50]
    obs profiles top [--service S] [--by self|total] [--since 5m] [--limit 20]
    obs sql "SELECT ..." [--limit 1000]
    obs drive [--duration 120] [--vus 5] [--no-ask]
    obs finding add|list|check|report|remove   (findings.json; see `obs finding add --help`)

`obs drive` asks the harness to run the mission's scenario against the services (the
drive that counts: the harness tags its requests; `python -m scenario run` by hand is
your own traffic) and waits for it; the scenario's record is written to
scenario/drive.json and its window printed.

The store URL comes from OBS_URL (default http://127.0.0.1:4318). Output longer than
60 lines is written in full under OBS_SPILL_DIR (default ./.obs/) and only its head is
printed. Every call appends one JSON line to OBS_LOG (default ./.obs/calls.jsonl).
Exit status: 0 ok (even with no match), 1 query refused or failed, 2 store unreachable.

Stdlib only, so a call costs little more than the interpreter's start.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from harness.telemetry.obs_metrics import metrics_list, metrics_query
from harness.telemetry.obs_store import (
    BIG_LIMIT,
    Client,
    Output,
    QueryFailed,
    StoreDown,
    attr_clause,
    clip,
    contains,
    fmt_ms,
    fmt_time,
    lit,
    since_ns,
    since_seconds,
    table,
    where,
)

DEFAULT_URL = "http://127.0.0.1:4318"
SPILL_LINES = 60  # longer output goes to a file
HEAD_LINES = 40  # lines printed when spilling
SEVERITY_FLOOR = {"TRACE": 1, "DEBUG": 5, "INFO": 9, "WARN": 13, "WARNING": 13, "ERROR": 17,
                  "FATAL": 21, "CRITICAL": 21}
# Attributes that say little about behaviour; `traces get` hides them unless --full.
NOISY_ATTRS = re.compile(
    r"^(net\.|network\.|client\.|user_agent\.|thread\.|code\.|http\.(scheme|flavor|host|server_name|user_agent)$"
    r"|server\.port$|url\.scheme$|telemetry\.|otel\.)"
)


# -- traces -----------------------------------------------------------------------------
def traces_search(client: Client, a: argparse.Namespace) -> Output:
    clauses = []
    if a.service:
        clauses.append(f"service = {lit(a.service)}")
    if a.name:
        clauses.append(contains("name", a.name))
    for pair in a.attr or []:
        clauses.append(attr_clause(pair))
    if a.min_ms is not None:
        clauses.append(f"duration_ms >= {float(a.min_ms)}")
    if a.max_ms is not None:
        clauses.append(f"duration_ms <= {float(a.max_ms)}")
    if a.status:
        clauses.append(f"status_code = {lit(a.status.upper())}")
    if a.kind:
        clauses.append(f"kind = {lit(a.kind.upper())}")
    if a.since is not None:
        clauses.append(f"start_ns >= {since_ns(a.since)}")
    order = "duration_ms DESC" if a.sort == "slowest" else "start_ns DESC"
    res = client.sql(
        "SELECT start_ns, service, name, duration_ms, status_code, trace_id, status_message, "
        f"count(*) OVER () AS total FROM spans {where(clauses)} ORDER BY {order} LIMIT {int(a.limit)}",
        limit=a.limit,
    )
    spans = res.dicts()
    if not spans:
        return Output(["no spans match"], 0)
    rows = [[fmt_time(s["start_ns"]), s["service"], clip(s["name"], 60), fmt_ms(s["duration_ms"]),
             s["status_code"] + (f" {clip(s['status_message'], 50)}" if s["status_message"] else ""),
             s["trace_id"] or "-"] for s in spans]
    lines = table(["time(UTC)", "service", "name", "duration", "status", "trace_id"], rows)
    lines.append(f"({len(spans)} of {spans[0]['total']} matching spans, {'slowest' if a.sort == 'slowest' else 'newest'} first)")
    return Output(lines, len(spans))


def _attr_text(attrs: dict[str, Any], full: bool) -> str:
    items = [(k, v) for k, v in sorted(attrs.items()) if full or not NOISY_ATTRS.match(k)]
    shown = items if full else items[:10]
    text = " ".join(f"{k}={v if full else clip(json.dumps(v) if not isinstance(v, str) else v, 70)}"
                    for k, v in shown)
    return text + (f" …(+{len(items) - len(shown)})" if len(items) > len(shown) else "")


def _span_lines(s: dict, depth: int, t0: int, full: bool) -> list[str]:
    pad = "  " * depth
    status = "" if s["status_code"] in ("UNSET", "OK") else f" {s['status_code']}"
    if s["status_message"]:
        status += f": {clip(s['status_message'], 120)}"
    head = (f"{pad}{s['name']} [{s['service']} {s['kind']}] +{fmt_ms((s['start_ns'] - t0) / 1e6)} "
            f"{fmt_ms(s['duration_ms'])}{status}")
    if s.get("orphan"):
        head += f"  (parent {s['parent_span_id']} not in store)"
    lines = [head]
    attrs = json.loads(s["attributes"] or "{}")
    if attrs:
        lines.append(f"{pad}    {_attr_text(attrs, full)}")
    for e in json.loads(s["events"] or "[]"):
        ea = e.get("attributes", {})
        if e["name"] == "exception":
            lines.append(f"{pad}    ! exception {ea.get('exception.type', '')}: "
                         f"{clip(ea.get('exception.message', ''), 160)}")
        else:
            lines.append(f"{pad}    · event {e['name']} {_attr_text(ea, full)}".rstrip())
    return lines


def _tree_order(spans: list[dict]) -> list[tuple[dict, int]]:
    """Depth-first (span, depth), children by start time; spans whose parent is absent
    are roots, marked orphan. Iterative: traces can be deep."""
    ids = {s["span_id"] for s in spans}
    children: dict[str | None, list[dict]] = {}
    for s in spans:
        parent = s["parent_span_id"] if s["parent_span_id"] in ids else None
        s["orphan"] = bool(s["parent_span_id"]) and parent is None
        children.setdefault(parent, []).append(s)
    out, seen = [], set()
    roots = children.get(None, [])
    for root in roots + spans:  # then any span a parent cycle kept out of reach
        stack = [(root, 0)]
        while stack:
            s, depth = stack.pop()
            if id(s) in seen:
                continue
            seen.add(id(s))
            out.append((s, depth))
            stack.extend((c, depth + 1) for c in reversed(children.get(s["span_id"], [])))
    return out


def traces_get(client: Client, a: argparse.Namespace) -> Output:
    tid = a.trace_id.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{1,32}", tid):
        raise QueryFailed(f"not a trace id: {a.trace_id!r} (hex, a prefix is fine)")
    match = f"trace_id = {lit(tid)}" if len(tid) == 32 else f"starts_with(trace_id, {lit(tid)})"
    ids = client.sql(f"SELECT DISTINCT trace_id FROM spans WHERE {match} LIMIT 11", limit=11).rows
    if not ids:
        return Output([f"no trace {tid} in the store"], 0)
    if len(ids) > 1:
        return Output([f"prefix {tid} matches several traces:"] + [f"  {r[0]}" for r in ids[:10]], 0)
    res = client.sql(f"SELECT * FROM spans WHERE trace_id = {lit(ids[0][0])} ORDER BY start_ns", limit=BIG_LIMIT)
    spans = res.dicts()
    t0 = min(s["start_ns"] for s in spans)
    t1 = max(s["end_ns"] for s in spans)
    errors = sum(s["status_code"] == "ERROR" for s in spans)
    services = sorted({s["service"] for s in spans})
    lines = [f"trace {ids[0][0]}  {len(spans)} spans  {fmt_ms((t1 - t0) / 1e6)}  "
             f"{errors} error(s)  services: {', '.join(services)}  start {fmt_time(t0)} UTC"]
    for s, depth in _tree_order(spans):
        lines += _span_lines(s, depth, t0, a.full)
    return Output(lines, len(spans))


# -- logs -------------------------------------------------------------------------------
def logs_search(client: Client, a: argparse.Namespace) -> Output:
    clauses = []
    if a.service:
        clauses.append(f"service = {lit(a.service)}")
    if a.severity:
        sev = a.severity.upper()
        if sev not in SEVERITY_FLOOR:
            raise QueryFailed(f"unknown severity {a.severity!r} (one of {', '.join(SEVERITY_FLOOR)})")
        clauses.append(f"(severity_number >= {SEVERITY_FLOOR[sev]} OR upper(severity_text) = {lit(sev)})")
    if a.text:
        clauses.append(contains("body", a.text))
    if a.trace:
        clauses.append(f"starts_with(trace_id, {lit(a.trace.lower())})")
    for pair in a.attr or []:
        clauses.append(attr_clause(pair))
    if a.since is not None:
        clauses.append(f"time_ns >= {since_ns(a.since)}")
    res = client.sql(
        "SELECT time_ns, service, severity_text, body, trace_id, count(*) OVER () AS total "
        f"FROM logs {where(clauses)} ORDER BY time_ns DESC LIMIT {int(a.limit)}",
        limit=a.limit,
    )
    logs = res.dicts()
    if not logs:
        return Output(["no log records match"], 0)
    lines = [f"{fmt_time(r['time_ns'])}  {r['service']}  {(r['severity_text'] or '-'):<5}  "
             f"{clip(r['body'], 300)}" + (f"  [trace {r['trace_id']}]" if r["trace_id"] else "")
             for r in logs]
    lines.append(f"({len(logs)} of {logs[0]['total']} matching records, newest first, times UTC)")
    return Output(lines, len(logs))


# -- profiles ---------------------------------------------------------------------------
_PROFILE_SQL = """
WITH s AS (SELECT service, stack, sum(samples) AS n, any_value(period_ms) AS period_ms
           FROM profiles {flt} GROUP BY service, stack),
f AS (SELECT service, n, string_split(stack, ';') AS frames FROM s),
tot AS (SELECT service, sum(n) AS total, sum(n * period_ms) AS cpu_ms FROM s GROUP BY service),
self AS (SELECT service, frames[-1] AS frame, sum(n) AS self FROM f GROUP BY ALL),
incl AS (SELECT service, frame, sum(n) AS incl
         FROM (SELECT service, n, unnest(list_distinct(frames)) AS frame FROM f) GROUP BY ALL)
SELECT incl.service, incl.frame, coalesce(self.self, 0) AS self, incl.incl, tot.total, tot.cpu_ms
FROM incl JOIN tot USING (service) LEFT JOIN self USING (service, frame)
QUALIFY row_number() OVER (PARTITION BY incl.service ORDER BY {order} DESC, incl.frame) <= {limit}
ORDER BY incl.service, {order} DESC, incl.frame
"""


def profiles_top(client: Client, a: argparse.Namespace) -> Output:
    clauses = [f"service = {lit(a.service)}"] if a.service else []
    if a.since is not None:
        clauses.append(f"time_ns >= {since_ns(a.since)}")
    order = "coalesce(self.self, 0)" if a.by == "self" else "incl.incl"
    res = client.sql(_PROFILE_SQL.format(flt=where(clauses), order=order, limit=int(a.limit)), limit=BIG_LIMIT)
    frames = res.dicts()
    if not frames:
        return Output(["no profile samples match"], 0)
    lines: list[str] = []
    current = None
    for f in frames:
        if f["service"] != current:
            current = f["service"]
            lines.append(f"{current}  {f['total']} samples  ~{(f['cpu_ms'] or 0) / 1000:.1f}s sampled  (by {a.by})")
            lines.append("   self%  total%  frame")
        total = f["total"] or 1
        lines.append(f"  {100 * f['self'] / total:6.1f}  {100 * f['incl'] / total:6.1f}  {f['frame']}")
    return Output(lines, len(frames))


# -- sql --------------------------------------------------------------------------------
def sql_cmd(client: Client, a: argparse.Namespace) -> Output:
    res = client.sql(a.query, limit=a.limit)
    cells = [["NULL" if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in r] for r in res.rows]
    lines = table(res.columns, cells)
    lines.append(f"({len(res.rows)} row{'s' if len(res.rows) != 1 else ''}"
                 f"{', truncated at --limit' if res.truncated else ''})")
    return Output(lines, len(res.rows))


# -- drive ------------------------------------------------------------------------------
DRIVE_RECORD = Path("scenario") / "drive.json"


def drive_cmd(client: Client, a: argparse.Namespace) -> Output:
    url = os.environ.get("OBS_DRIVE_URL")
    if not url:
        raise QueryFailed("no drive endpoint: OBS_DRIVE_URL is not set (the harness sets it in a launch)")
    ask = {"duration": a.duration, "vus": a.vus, "ask": not a.no_ask}
    print(f"obs: the harness is driving the scenario ({a.duration:g} s, {a.vus} users); "
          "this waits until it has ended", file=sys.stderr, flush=True)
    record = Client(url).post("/drive", ask, timeout=a.duration + 240)
    lines = [f"drive: {record.get('start')} -> {record.get('end')} ({record.get('duration_s')} s, "
             f"{record.get('vus')} users)"]
    requests, errors = record.get("requests") or {}, record.get("errors") or {}
    lines += table(["operation", "requests", "errors"], [[op, str(n), str(errors.get(op, 0))]
                                                         for op, n in sorted(requests.items())])
    target = DRIVE_RECORD if DRIVE_RECORD.parent.is_dir() else Path("drive.json")
    try:
        target.write_text(json.dumps(record, indent=2) + "\n")
        lines.append(f"(record written to {target})")
    except OSError as exc:
        lines.append(f"(could not write {target}: {exc})")
    return Output(lines, sum(requests.values()))


# -- CLI --------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, service: bool = True, since: bool = True) -> None:
    if service:
        p.add_argument("--service", help="exact service.name")
    if since:
        p.add_argument("--since", type=since_seconds, help="only the last 30s / 5m / 2h / 1d")


def parse_query(argv: list[str]) -> argparse.Namespace | None:
    """An `obs` command line as obs reads it; None for one that is not a query of the telemetry
    (`obs drive`, `obs finding ...`). Raises SystemExit on arguments obs does not accept."""
    args = build_parser().parse_args(argv)
    return None if args.func is drive_cmd or getattr(args, "signal", "") == "finding" else args


def usage_fix(prog: str, message: str) -> str:
    """The fix line under argparse's message: the values a closed option takes, else where the help is."""
    choices = re.search(r"invalid choice: .*\(choose from (.*)\)\s*$", message)
    if choices:
        values = ", ".join(v.strip().strip("'\"") for v in choices.group(1).split(","))
        return f"give one of: {values}"
    if "arguments are required" in message:
        return f"add them (`{prog} --help` says what each one is)"
    return f"see `{prog} --help`"


class ObsParser(argparse.ArgumentParser):
    """argparse, with a fix line under each refusal (exit 2, nothing written)."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n  fix: {usage_fix(self.prog, message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ObsParser(prog="obs", description="Query the telemetry store (traces, metrics, logs, "
                                     "profiles). Store URL from OBS_URL. Tables: see `obs sql \"SHOW TABLES\"`.")
    sub = parser.add_subparsers(dest="signal", required=True)

    traces = sub.add_parser("traces", help="spans and traces").add_subparsers(dest="action", required=True)
    p = traces.add_parser("search", help="one line per span, newest first")
    _common(p)
    p.add_argument("--name", help="span name contains (case-insensitive)")
    p.add_argument("--attr", action="append", metavar="K=V", help="span or resource attribute equals (repeatable)")
    p.add_argument("--min-ms", type=float)
    p.add_argument("--max-ms", type=float)
    p.add_argument("--status", choices=["ERROR", "OK", "UNSET", "error", "ok", "unset"])
    p.add_argument("--kind", help="SERVER, CLIENT, INTERNAL, PRODUCER, CONSUMER")
    p.add_argument("--sort", choices=["newest", "slowest"], default="newest")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=traces_search)
    p = traces.add_parser("get", help="one trace as a tree (a unique id prefix is enough)")
    p.add_argument("trace_id")
    p.add_argument("--full", action="store_true", help="every attribute, unclipped")
    p.set_defaults(func=traces_get)

    metrics = sub.add_parser("metrics", help="metric data points").add_subparsers(dest="action", required=True)
    p = metrics.add_parser("list", help="metric names with type, unit, services, points, labels")
    _common(p, since=False)
    p.set_defaults(func=metrics_list)
    p = metrics.add_parser("query", help="aggregate one metric over the window, grouped by labels")
    p.add_argument("name")
    _common(p)
    p.add_argument("--by", help="comma-separated labels: attribute keys, resource keys or 'service'")
    p.add_argument("--agg", choices=["sum", "avg", "max", "min", "rate", "count", "last", "p50", "p95", "p99"])
    p.set_defaults(func=metrics_query)

    logs = sub.add_parser("logs", help="log records").add_subparsers(dest="action", required=True)
    p = logs.add_parser("search", help="one line per record, newest first")
    _common(p)
    p.add_argument("--severity", help="this level or above: DEBUG, INFO, WARN, ERROR, FATAL")
    p.add_argument("--text", help="body contains (case-insensitive)")
    p.add_argument("--trace", help="trace id (or prefix)")
    p.add_argument("--attr", action="append", metavar="K=V", help="record or resource attribute equals")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=logs_search)

    profiles = sub.add_parser("profiles", help="sampled stacks (wall clock, idle threads left out)").add_subparsers(dest="action", required=True)
    p = profiles.add_parser("top", help="hottest frames per service")
    _common(p)
    p.add_argument("--by", choices=["self", "total"], default="self")
    p.add_argument("--limit", type=int, default=20, help="frames per service")
    p.set_defaults(func=profiles_top)

    p = sub.add_parser("sql", help="one read-only SQL query (SELECT / WITH / DESCRIBE / SHOW)")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=1000)
    p.set_defaults(func=sql_cmd)

    p = sub.add_parser("drive", help="have the harness run the scenario (the drive that counts) and wait")
    p.add_argument("--duration", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument("--vus", type=int, default=5, help="virtual users (default 5)")
    p.add_argument("--no-ask", action="store_true", help="skip the assistant questions")
    p.set_defaults(func=drive_cmd)

    from harness.telemetry.obs_finding import add_parser as add_finding_parser

    add_finding_parser(sub, parse_query)  # `obs finding add|list|check|report|remove`: findings.json
    return parser


def _obs_dir(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or default)


def emit(out: Output, signal: str) -> None:
    """Print, or spill the whole output to a file and print its head and the path."""
    if len(out.lines) <= SPILL_LINES:
        print("\n".join(out.lines))
        return
    spill_dir = _obs_dir("OBS_SPILL_DIR", ".obs")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = spill_dir / f"{signal}-{stamp}-{os.getpid()}.txt"
    try:
        spill_dir.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(out.lines) + "\n")
    except OSError as exc:
        print("\n".join(out.lines))
        print(f"obs: could not write the spill file {path}: {exc}", file=sys.stderr)
        return
    print("\n".join(out.lines[:HEAD_LINES]))
    print(f"... {len(out.lines) - HEAD_LINES} more lines; the full output ({len(out.lines)} lines) is in {path}")


def log_call(signal: str, args: list[str], rows: int, ok: bool) -> None:
    path = _obs_dir("OBS_LOG", ".obs/calls.jsonl")
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
             "signal": signal, "args": args, "rows": rows, "ok": ok}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")
    except OSError as exc:
        print(f"obs: could not append to {path}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    client = Client(os.environ.get("OBS_URL") or DEFAULT_URL)
    try:
        out = args.func(client, args)
    except StoreDown as exc:
        print(f"obs: {exc}", file=sys.stderr)
        log_call(args.signal, argv, 0, False)
        return 2
    except QueryFailed as exc:
        print(f"obs: {exc}", file=sys.stderr)
        log_call(args.signal, argv, 0, False)
        return 1
    emit(out, args.signal)
    log_call(args.signal, argv, out.rows, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
