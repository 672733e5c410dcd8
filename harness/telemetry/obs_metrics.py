"""`obs metrics list` and `obs metrics query`: the metric names a store holds, and one
metric aggregated over its series (harness/telemetry/series.py folds them). Stdlib only."""

from __future__ import annotations

import argparse
import json

from harness.telemetry.obs_store import BIG_LIMIT, Client, Output, QueryFailed, fmt_num, lit, since_ns, table, where
from harness.telemetry.series import Series, add_segment, aggregate, series_kind


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


