"""`telemetry`: /metrics before any load: KV cache in use, requests already running or
waiting (something else using the server), and the memory figures the server exposes."""

from __future__ import annotations

from typing import Any

from harness.fitness.phases import Ctx, Skip
from harness.load import metrics

# Memory gauges worth keeping when a server exposes them (bytes).
MEMORY = ("process_resident_memory_bytes", "process_virtual_memory_bytes")


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    ep = ctx.endpoint
    snap = metrics.scrape(ep.base_url, api_key=ep.api_key, timeout=10)
    if snap is None:
        raise Skip(f"{metrics.metrics_url(ep.base_url)} cannot be read (no Prometheus /metrics: "
                   "llama.cpp needs --metrics)")
    figures = snap.figures()
    memory = {k: snap.raw[k] for k in MEMORY if k in snap.raw}
    kv = None if snap.kv_usage is None else round(snap.kv_usage * 100, 2)
    details = {"server": snap.server, "figures": figures, "memory_bytes": memory,
               "other_work": bool(snap.busy), "metrics_url": metrics.metrics_url(ep.base_url)}
    return {"telemetry.busy_requests": snap.busy, "telemetry.kv_usage_percent": kv}, details
