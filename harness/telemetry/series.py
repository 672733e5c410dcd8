"""Metric series as `obs metrics query` folds them: each series' points over the window
(counters as their increase across resets, gauges as last/avg/min/max, histograms as
merged buckets), and the aggregate asked for across series. Stdlib only, as obs is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Series:
    """What one series (service + attributes + instance) did over the window."""
    labels: dict[str, Any]
    kind: str  # counter | gauge | histogram
    increase: float = 0.0  # counter
    last_t: int = 0
    last: float | None = None  # gauge: latest value
    total: float = 0.0  # gauge: sum of points (for avg)
    n: int = 0
    max: float | None = None
    min: float | None = None
    count: float = 0.0  # histogram
    sum: float = 0.0
    bounds: list[float] | None = None
    buckets: list[float] | None = None
    start_t: int | None = None


def series_kind(seg: dict) -> str:
    if seg["type"] == "histogram":
        return "histogram"
    return "counter" if seg["type"] == "sum" and seg["mono"] else "gauge"


def _delta(last: Any, base: Any) -> float:
    return float(last or 0) - float(base or 0)


def add_segment(series: Series, seg: dict) -> None:
    """Fold one (series, start time) segment in. Cumulative points give an increase
    against the last point before the window (or against 0 when the segment has none);
    delta points add up."""
    cumulative = seg["temporality"] != "DELTA"
    start = seg["start_ns"] or seg["first_t"]
    series.start_t = start if series.start_t is None else min(series.start_t, start)
    if series.kind == "counter":
        series.increase += _delta(seg["last_v"], seg["base_v"]) if cumulative else float(seg["sum_v"] or 0)
    elif series.kind == "gauge":
        if seg["last_t"] >= series.last_t:
            series.last = seg["last_v"]
        series.total += float(seg["sum_v"] or 0)
        series.n += seg["n"]
        series.max = seg["max_v"] if series.max is None else max(series.max, seg["max_v"])
        series.min = seg["min_v"] if series.min is None else min(series.min, seg["min_v"])
    else:
        _add_histogram(series, seg, cumulative)
    series.last_t = max(series.last_t, seg["last_t"])


def _add_histogram(series: Series, seg: dict, cumulative: bool) -> None:
    bounds = json.loads(seg["bounds"] or "[]")
    last = json.loads(seg["last_buckets"] or "[]")
    if cumulative:
        base = json.loads(seg["base_buckets"] or "[]") or [0] * len(last)
        buckets = [x - y for x, y in zip(last, base)] if len(base) == len(last) else last
        series.count += _delta(seg["last_count"], seg["base_count"])
        series.sum += _delta(seg["last_sum"], seg["base_sum"])
    else:  # delta: one point per segment as the SDKs write them
        buckets = last
        series.count += float(seg["sum_count"] or 0)
        series.sum += float(seg["sum_sum"] or 0)
    if series.buckets is None:
        series.bounds, series.buckets = bounds, [float(b) for b in buckets]
    elif bounds == series.bounds:
        series.buckets = [x + y for x, y in zip(series.buckets, buckets)]


def percentile(bounds: list[float], buckets: list[float], q: float) -> float | None:
    """Linear interpolation inside the bucket holding the q-th value; the overflow
    bucket answers its lower bound (the true value is only known to be above it)."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank, seen = q * total, 0.0
    for i, c in enumerate(buckets):
        if c > 0 and seen + c >= rank:
            if i >= len(bounds):
                return bounds[-1] if bounds else None
            lower = bounds[i - 1] if i > 0 else min(0.0, bounds[0])
            return lower + (bounds[i] - lower) * ((rank - seen) / c)
        seen += c
    return bounds[-1] if bounds else None


def _bucket_edge(bounds: list[float], buckets: list[float], highest: bool) -> float | None:
    used = [i for i, c in enumerate(buckets) if c > 0]
    if not used or not bounds:
        return None
    i = used[-1] if highest else used[0]
    return bounds[min(i, len(bounds) - 1)] if highest else (bounds[i - 1] if i > 0 else min(0.0, bounds[0]))


def _window_s(members: list[Series], since: float | None) -> float | None:
    if since is not None:
        return since
    start = min(s.start_t for s in members)
    span = (max(s.last_t for s in members) - start) / 1e9
    return span if span > 0 else None


def aggregate(members: list[Series], agg: str, since: float | None) -> float | None:
    kind = members[0].kind
    if kind == "counter":
        values = [s.increase for s in members]
        if agg in ("sum", "last", "count"):
            return sum(values)
        if agg == "rate":
            w = _window_s(members, since)
            return sum(values) / w if w else None
        return {"avg": lambda v: sum(v) / len(v), "max": max, "min": min}[agg](values)
    if kind == "gauge":
        if agg in ("sum", "last"):
            return sum(s.last or 0 for s in members)
        n = sum(s.n for s in members)
        if agg == "count":
            return n
        if agg == "avg":
            return sum(s.total for s in members) / n if n else None
        vals = [s.max if agg == "max" else s.min for s in members if s.max is not None]
        return (max if agg == "max" else min)(vals) if vals else None
    return _aggregate_histogram(members, agg, since)


def _merged_buckets(members: list[Series]) -> tuple[list[float], list[float]]:
    bounds = members[0].bounds or []
    merged = [0.0] * len(members[0].buckets or [])
    for s in members:
        if s.bounds == bounds and s.buckets and len(s.buckets) == len(merged):
            merged = [x + y for x, y in zip(merged, s.buckets)]
    return bounds, merged


def _aggregate_histogram(members: list[Series], agg: str, since: float | None) -> float | None:
    count = sum(s.count for s in members)
    total = sum(s.sum for s in members)
    if agg == "count":
        return count
    if agg == "sum":
        return total
    if agg == "avg":
        return total / count if count else None
    if agg == "rate":
        w = _window_s(members, since)
        return count / w if w else None
    bounds, buckets = _merged_buckets(members)
    if agg in ("max", "min"):
        return _bucket_edge(bounds, buckets, agg == "max")
    if agg == "last":
        return total / count if count else None
    return percentile(bounds, buckets, int(agg[1:]) / 100)


