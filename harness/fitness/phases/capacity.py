"""`capacity`: the load benchmark's closed-loop levels (harness.load.runner) against the
served model: at each level, that many agents' requests in flight, cache-cold prompts,
exactly `output_tokens` out. Aggregate output tok/s and p95 TTFT/ITL per level (numpy
percentiles, never means); the carried concurrency is the highest level with no failed
request and p95 TTFT within `capacity.ttft_slo_s`. Its files land in `<report>/capacity/`.
"""

from __future__ import annotations

from typing import Any

from harness.errors import UserError
from harness.fitness.endpoint import PhaseError
from harness.fitness.phases import Ctx
from harness.load.runner import LoadOptions, Runner, check


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    ep, cfg = ctx.endpoint, ctx.cfg.capacity
    levels = list(reversed(cfg.levels)) if ctx.reverse else list(cfg.levels)
    opts = LoadOptions(base_url=ep.base_url, model=ep.model, api_key=ep.api_key, levels=levels,
                       shapes={"agent": cfg.input_tokens}, output_tokens=cfg.output_tokens,
                       requests=cfg.requests_per_level or None, rounds=2, min_requests=4, seed=ctx.cfg.seed,
                       warmup=False, allow_busy=False, idle_timeout_s=120, request_timeout_s=ctx.cfg.request_timeout_s,
                       sample_interval_s=1.0, out_root=ctx.out_dir / "capacity")
    try:
        target = check(opts)
    except UserError as exc:
        raise PhaseError(exc.render()) from None
    runner = Runner(opts, target)
    rows = runner.run()
    if not rows:
        raise PhaseError("no level finished")
    table = [{"n": r["concurrency"], "requests": r["requests"], "failed": r["failed"],
              "aggregate_tps": r["output_throughput_tok_s"], "ttft_ms_p95": _ms(r["ttft_p95_s"]),
              "itl_ms_p95": r["itl_p95_ms"], "ttft_s_p50": r["ttft_p50_s"], "kv_peak_percent":
              r["kv_cache_peak_percent"], "preemptions": r["preemptions"]} for r in rows]
    table.sort(key=lambda r: r["n"])
    tps = [r["aggregate_tps"] for r in table if r["aggregate_tps"] is not None]
    carried = [r["n"] for r in table if r["failed"] == 0 and r["ttft_ms_p95"] is not None
               and r["ttft_ms_p95"] / 1000 <= cfg.ttft_slo_s]
    ttfts = [r["ttft_ms_p95"] / 1000 for r in table if r["ttft_ms_p95"] is not None]
    itls = [r["itl_ms_p95"] for r in table if r["itl_ms_p95"] is not None]
    best = max(table, key=lambda r: r["aggregate_tps"] or 0)
    metrics = {
        "capacity.peak_output_tps": max(tps) if tps else None,
        "capacity.carried_concurrency": float(max(carried)) if carried else 0.0,
        "capacity.worst_ttft_p95_s": round(max(ttfts), 4) if ttfts else None,
        "capacity.worst_itl_p95_ms": round(max(itls), 3) if itls else None,
        "capacity.failed_requests": float(sum(r["failed"] for r in table)),
    }
    return metrics, {"levels": table, "best_n": best["n"], "order": levels, "files": str(runner.path),
                     "input_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens,
                     "ttft_slo_s": cfg.ttft_slo_s}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
