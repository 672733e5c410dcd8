"""The record's serving section, from the per-turn table and the timeline.

Percentiles with numpy. Decode speed "at the mission's median / p90 context" is read off
the calls themselves: decode tok/s against context (prompt tokens) of the calls that have
their own figures, interpolated at the median and p90 context of all calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.records.serving import ServingFigures, ToolCallHealth


def _first_last(readings: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    values = [r[key] for r in readings if r.get(key) is not None]
    return (values[0], values[-1]) if values else None


def _grew(readings: list[dict[str, Any]], key: str) -> float | None:
    pair = _first_last(readings, key)
    return None if pair is None or pair[1] < pair[0] else pair[1] - pair[0]


def serving_section(rows: list[dict[str, Any]], readings: list[dict[str, Any]],
                    health: ToolCallHealth) -> ServingFigures:
    fig = ServingFigures(tool_calls=health, readings=len(readings), turns=len(rows))
    servers = {r.get("server") for r in readings if r.get("server") not in (None, "unknown")}
    fig.server = servers.pop() if len(servers) == 1 else "unknown"
    exact = [r for r in rows if r["server"]["attribution"] == "exact"]
    fig.turns_exact = len(exact)

    hits, queries = _grew(readings, "prefix_cache_hits_total"), _grew(readings, "prefix_cache_queries_total")
    if hits is not None and queries:
        fig.prefix_cache_hit, fig.prefix_cache_source = round(hits / queries, 4), "server"
    else:
        prompt = sum(r["prompt_tokens"] for r in rows)
        if prompt:
            fig.prefix_cache_hit = round(sum(r["cached_tokens"] for r in rows) / prompt, 4)
            fig.prefix_cache_source = "usage"

    contexts = [r["prompt_tokens"] for r in rows if r["prompt_tokens"]]
    if contexts:
        fig.context_p50 = int(round(float(np.percentile(contexts, 50))))
        fig.context_p90 = int(round(float(np.percentile(contexts, 90))))
    speeds = sorted((r["prompt_tokens"], r["server"]["decode_tps"]) for r in exact
                    if r["server"]["decode_tps"] and r["prompt_tokens"])
    if speeds and contexts:
        xs, ys = np.array([s[0] for s in speeds], float), np.array([s[1] for s in speeds], float)
        fig.decode_tps_p50_context = round(float(np.interp(fig.context_p50, xs, ys)), 1)
        fig.decode_tps_p90_context = round(float(np.interp(fig.context_p90, xs, ys)), 1)

    kv = [r["kv_usage"] for r in readings if r.get("kv_usage") is not None]
    fig.kv_peak = round(max(kv), 4) if kv else None
    preempted = _grew(readings, "preemptions_total")
    fig.preemptions = int(preempted) if preempted is not None else None
    queue = [r["server"]["queue_s"] for r in exact if r["server"]["queue_s"] is not None]
    fig.queue_wait_p95_s = round(float(np.percentile(queue, 95)), 3) if queue else None
    prefill = [r["server"]["prefill_s"] for r in exact if r["server"]["prefill_s"] is not None]
    fig.prefill_p50_s = round(float(np.percentile(prefill, 50)), 3) if prefill else None
    if rows and not exact:
        fig.notes.append("no call had its own server figures (overlapping calls, or no boundary readings)")
    return fig
