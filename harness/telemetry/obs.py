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
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.telemetry.series import Series, add_segment, aggregate, series_kind

DEFAULT_URL = "http://127.0.0.1:4318"
SPILL_LINES = 60  # longer output goes to a file
HEAD_LINES = 40  # lines printed when spilling
HTTP_TIMEOUT_S = 120.0
BIG_LIMIT = 200_000  # internal queries that aggregate client-side
SEVERITY_FLOOR = {"TRACE": 1, "DEBUG": 5, "INFO": 9, "WARN": 13, "WARNING": 13, "ERROR": 17,
                  "FATAL": 21, "CRITICAL": 21}
# Attributes that say little about behaviour; `traces get` hides them unless --full.
NOISY_ATTRS = re.compile(
    r"^(net\.|network\.|client\.|user_agent\.|thread\.|code\.|http\.(scheme|flavor|host|server_name|user_agent)$"
    r"|server\.port$|url\.scheme$|telemetry\.|otel\.)"
)


class StoreDown(Exception):
    """The store did not answer (exit 2)."""


class QueryFailed(Exception):
    """The store answered with an error (exit 1)."""


@dataclass
class Result:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


@dataclass
class Output:
    lines: list[str] = field(default_factory=list)
    rows: int = 0


# -- the store --------------------------------------------------------------------------
class Client:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def sql(self, sql: str, limit: int = 1000) -> Result:
        body = json.dumps({"sql": sql, "limit": limit}).encode()
        req = urllib.request.Request(f"{self.url}/query", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                doc = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise QueryFailed(_error_text(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StoreDown(f"telemetry store not reachable at {self.url} ({reason}); "
                            "is it running, and is OBS_URL right?") from None
        except ValueError as exc:
            raise QueryFailed(f"store answered something that is not JSON: {exc}") from None
        return Result(doc["columns"], doc["rows"], bool(doc.get("truncated")))


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return f"store refused the query (HTTP {exc.code}): {json.loads(exc.read())['error']}"
    except Exception:
        return f"store answered HTTP {exc.code}"


# -- SQL helpers ------------------------------------------------------------------------
def lit(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def json_path(key: str) -> str:
    # Quoted key: attribute names contain dots (http.route).
    return lit('$."' + key.replace('"', '\\"') + '"')


def attr_clause(pair: str, columns: tuple[str, ...] = ("attributes", "resource")) -> str:
    key, _, value = pair.partition("=")
    path = json_path(key.strip())
    ors = " OR ".join(f"{c}->>{path} = {lit(value.strip())}" for c in columns)
    return f"({ors})"


def since_seconds(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 30s, 5m, 2h, 1d)")
    scale = {"ms": 1e-3, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return float(m.group(1)) * scale


def since_ns(seconds: float | None) -> int | None:
    return None if seconds is None else time.time_ns() - int(seconds * 1e9)


def where(clauses: list[str]) -> str:
    return ("WHERE " + " AND ".join(clauses)) if clauses else ""


def contains(column: str, text: str) -> str:
    return f"contains(lower({column}), lower({lit(text)}))"


# -- formatting -------------------------------------------------------------------------
def fmt_time(ns: int | None) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.2f}s"
    return f"{ms:.1f}ms" if ms >= 1 else f"{ms:.2f}ms"


def fmt_num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def clip(text: Any, width: int) -> str:
    s = "" if text is None else str(text).replace("\n", " ⏎ ")
    return s if len(s) <= width else s[: width - 1] + "…"


def table(header: list[str], rows: list[list[str]], max_width: int = 60) -> list[str]:
    """Left-aligned columns, each as wide as its widest cell (capped for alignment
    only: longer cells are printed whole)."""
    widths = [min(max_width, max([len(h)] + [len(r[i]) for r in rows])) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header)] + [line(r) for r in rows]


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


# -- metrics ----------------------------------------------------------------------------
def metrics_list(client: Client, a: argparse.Namespace) -> Output:
    flt = where([f"service = {lit(a.service)}"] if a.service else [])
    res = client.sql(
        "SELECT name, any_value(type) AS type, bool_or(is_monotonic) AS mono, any_value(unit) AS unit, "
        "string_agg(DISTINCT service, ',' ORDER BY service) AS services, count(*) AS points, "
        "list_sort(list_distinct(flatten(list(json_keys(attributes))))) AS labels "
        f"FROM metrics {flt} GROUP BY name ORDER BY name",
        limit=BIG_LIMIT,
    )
    ms = res.dicts()
    if not ms:
        return Output(["no metrics in the store" + (f" for service {a.service}" if a.service else "")], 0)
    rows = [[m["name"], m["type"] + ("/monotonic" if m["mono"] else ""), m["unit"] or "-", m["services"],
             str(m["points"]), ",".join(m["labels"] or []) or "-"] for m in ms]
    return Output(table(["name", "type", "unit", "services", "points", "labels"], rows), len(ms))


_SEGMENTS_SQL = """
SELECT service, attributes, any_value(resource) AS resource,
  resource->>'$."service.instance.id"' AS inst, start_ns,
  any_value(type) AS type, any_value(temporality) AS temporality,
  any_value(is_monotonic) AS mono, any_value(unit) AS unit,
  count(*) FILTER (WHERE time_ns >= {w}) AS n,
  min(time_ns) FILTER (WHERE time_ns >= {w}) AS first_t,
  max(time_ns) FILTER (WHERE time_ns >= {w}) AS last_t,
  arg_max(value, time_ns) FILTER (WHERE time_ns >= {w}) AS last_v,
  arg_max(value, time_ns) FILTER (WHERE time_ns < {w}) AS base_v,
  sum(value) FILTER (WHERE time_ns >= {w}) AS sum_v,
  max(value) FILTER (WHERE time_ns >= {w}) AS max_v,
  min(value) FILTER (WHERE time_ns >= {w}) AS min_v,
  arg_max(count, time_ns) FILTER (WHERE time_ns >= {w}) AS last_count,
  arg_max(count, time_ns) FILTER (WHERE time_ns < {w}) AS base_count,
  sum(count) FILTER (WHERE time_ns >= {w}) AS sum_count,
  arg_max(sum, time_ns) FILTER (WHERE time_ns >= {w}) AS last_sum,
  arg_max(sum, time_ns) FILTER (WHERE time_ns < {w}) AS base_sum,
  sum(sum) FILTER (WHERE time_ns >= {w}) AS sum_sum,
  arg_max(bucket_counts, time_ns) FILTER (WHERE time_ns >= {w}) AS last_buckets,
  arg_max(bucket_counts, time_ns) FILTER (WHERE time_ns < {w}) AS base_buckets,
  arg_max(bounds, time_ns) FILTER (WHERE time_ns >= {w}) AS bounds
FROM metrics {flt}
GROUP BY service, attributes, inst, start_ns
HAVING count(*) FILTER (WHERE time_ns >= {w}) > 0
"""


def _label(series: Series, key: str, resource: dict) -> str:
    if key == "service":
        return series.labels["service"]
    if key in series.labels["attributes"]:
        return str(series.labels["attributes"][key])
    return str(resource.get(key, "-"))


def metrics_query(client: Client, a: argparse.Namespace) -> Output:
    clauses = [f"name = {lit(a.name)}"] + ([f"service = {lit(a.service)}"] if a.service else [])
    w = since_ns(a.since) or 0
    res = client.sql(_SEGMENTS_SQL.format(w=w, flt=where(clauses)), limit=BIG_LIMIT)
    segs = res.dicts()
    if not segs:
        known = client.sql(f"SELECT count(*) FROM metrics WHERE name = {lit(a.name)}", limit=1).rows[0][0]
        why = "no points in the window" if known else "no such metric (see `obs metrics list`)"
        return Output([f"{a.name}: {why}"], 0)
    kind = series_kind(segs[0])
    default = {"counter": ["sum"], "gauge": ["last"], "histogram": ["count", "avg", "p50", "p95", "p99"]}[kind]
    aggs = [a.agg] if a.agg else default
    if kind == "gauge" and "rate" in aggs:
        raise QueryFailed(f"{a.name} is not a monotonic sum or a histogram: rate does not apply")
    if kind != "histogram" and any(x.startswith("p") for x in aggs):
        raise QueryFailed(f"{a.name} is a {kind}: percentiles need a histogram")
    by = [k.strip() for k in (a.by or "").split(",") if k.strip()]
    groups = _group_series(segs, kind, by)
    rows = []
    for key, members in sorted(groups.items()):
        rows.append([*key, *(fmt_num(aggregate(members, x, a.since)) for x in aggs)])
    if len(aggs) == 1:
        rows.sort(key=lambda r: _sort_key(r[-1]), reverse=True)
    s0 = segs[0]
    window = f"last {fmt_window(a.since)}" if a.since is not None else "all data"
    header = (f"{a.name}  {s0['type']}{'/monotonic' if s0['mono'] else ''}"
              f"{' ' + s0['temporality'] if s0['temporality'] else ''}  unit {s0['unit'] or '-'}  "
              f"window {window}  agg {','.join(aggs)}")
    return Output([header] + table([*(by or ["(all)"]), *aggs], rows), len(rows))


def _group_series(segs: list[dict], kind: str, by: list[str]) -> dict[tuple, list[Series]]:
    series: dict[tuple, Series] = {}
    resources: dict[tuple, dict] = {}
    for seg in segs:
        skey = (seg["service"], seg["attributes"], seg["inst"])
        if skey not in series:
            series[skey] = Series({"service": seg["service"], "attributes": json.loads(seg["attributes"] or "{}")}, kind)
            resources[skey] = json.loads(seg["resource"] or "{}")
        add_segment(series[skey], seg)
    groups: dict[tuple, list[Series]] = {}
    for skey, s in series.items():
        gkey = tuple(f"{k}={_label(s, k, resources[skey])}" for k in by) or ("(all)",)
        groups.setdefault(gkey, []).append(s)
    return groups


def _sort_key(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("-inf")


def fmt_window(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


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


# -- CLI --------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, service: bool = True, since: bool = True) -> None:
    if service:
        p.add_argument("--service", help="exact service.name")
    if since:
        p.add_argument("--since", type=since_seconds, help="only the last 30s / 5m / 2h / 1d")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="obs", description="Query the telemetry store (traces, metrics, logs, "
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
