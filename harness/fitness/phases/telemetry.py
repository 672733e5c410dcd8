"""`telemetry`: /metrics before any load: KV cache in use, requests already running or
waiting (something else using the server), the memory figures the server exposes, and the
seed's `vram_baseline` (GiB of GPU memory in use before the run) where a GPU gauge is served
(harness/fitness/vram.py; null with the reason where not)."""

from __future__ import annotations

from typing import Any

from harness.fitness import vram
from harness.fitness.phases import Ctx, Skip
from harness.load import metrics

# Memory gauges worth keeping when a server exposes them (bytes).
MEMORY = ("process_resident_memory_bytes", "process_virtual_memory_bytes")


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    ep = ctx.endpoint
    snap = metrics.scrape(ep.base_url, api_key=ep.api_key, timeout=10)
    if snap is None:
        ctx.vram.update(gib=None, reason="the telemetry phase could not read /metrics")
        raise Skip(f"{metrics.metrics_url(ep.base_url)} cannot be read (no Prometheus /metrics: "
                   "llama.cpp needs --metrics)")
    figures = snap.figures()
    memory = {k: snap.raw[k] for k in MEMORY if k in snap.raw}
    kv = None if snap.kv_usage is None else round(snap.kv_usage * 100, 2)
    gib, source = vram.used_gib(snap.raw)
    ctx.vram.update(gib=gib, reason=None if gib is not None else source, gauge=source if gib is not None else None)
    details = {"server": snap.server, "figures": figures, "memory_bytes": memory,
               "other_work": bool(snap.busy), "metrics_url": metrics.metrics_url(ep.base_url),
               "vram_baseline_gib": gib, "vram": source}
    return {"telemetry.busy_requests": snap.busy, "telemetry.kv_usage_percent": kv}, details
