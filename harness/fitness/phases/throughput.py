"""`throughput`: one request at a time, at each context size: TTFT, prefill tok/s (prompt
tokens / TTFT) and decode tok/s (tokens after the first / their time), timed by the load
benchmark's streaming client (harness.probe.Prober). Every prompt starts with a unique
tag and seeded filler, so no prefix cache serves any of it. A context above the served
one (prompt + output past max_model_len) is null with its reason, and the run goes on.

A 429 or transient 5xx is asked again under the run's retry policy (the load client keeps no
headers, so the policy's default wait stands in for Retry-After). `vram_peak_gib` per context
is the highest GPU-memory reading of /metrics just before and after that context's request,
where the server exposes a GPU gauge (harness/fitness/vram.py), else null.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx

from harness.fitness import vram
from harness.fitness.phases import Ctx, Skip
from harness.load import metrics as load_metrics
from harness.load.prompts import Prompts
from harness.probe import Prober

# The chat template and the instruction take some tokens besides the filler.
TEMPLATE_SLACK = 64


_STATUS = re.compile(r"^HTTP (\d{3})\b")


def _stream(ctx: Ctx, prober: Prober, prompt: str, max_tokens: int):
    """One timed request, asked again on a retried status (a fresh request: its timing is its own)."""
    def retried(exc: BaseException) -> str | None:  # the prober says its status in its error's text
        m = _STATUS.match(str(exc)) if isinstance(exc, httpx.HTTPError) else None
        return m[1] if m and int(m[1]) in ctx.endpoint.retry.statuses else None

    for attempt in ctx.endpoint.retrier(transient=retried):
        with attempt:
            got = prober.stream(prompt, max_tokens)
    return got


def _vram(ctx: Ctx) -> float | None:
    snap = load_metrics.scrape(ctx.endpoint.base_url, api_key=ctx.endpoint.api_key, timeout=5)
    return vram.used_gib(snap.raw)[0] if snap is not None else None


def _calibrate(ctx: Ctx, prober: Prober, tag: str, seed: int) -> float:
    """Tokens per filler word, from the server's own usage (two sizes cancel the template)."""
    small = _stream(ctx, prober, Prompts(tag, seed, "cal-small", 50).make(0, 0)[1], 1).prompt_tokens
    big = _stream(ctx, prober, Prompts(tag, seed, "cal-big", 550).make(0, 0)[1], 1).prompt_tokens
    if not small or not big or big <= small:
        return 1.3
    return (big - small) / 500


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    ep, cfg = ctx.endpoint, ctx.cfg.throughput
    contexts = list(reversed(cfg.contexts)) if ctx.reverse else list(cfg.contexts)
    run_tag = secrets.token_hex(4)
    try:
        prober = Prober(ep.base_url, ep.model, api_key=ep.api_key, timeout_s=ctx.cfg.request_timeout_s)
    except httpx.HTTPError as exc:
        raise Skip(f"the streaming client cannot talk to {ep.base_url}: {exc}") from None
    metrics: dict[str, float | None] = {}
    rows: dict[str, dict[str, Any]] = {}
    gauge = _vram(ctx) is not None  # read memory around each request only where a GPU gauge is served
    try:
        try:
            per_word = _calibrate(ctx, prober, run_tag, ctx.cfg.seed)
        except httpx.HTTPError as exc:
            from harness.fitness.endpoint import PhaseError

            raise PhaseError(f"calibration request failed: {exc}") from None
        for size in contexts:
            if ctx.cancelled():
                break
            row: dict[str, Any] = {"target_tokens": size, "prompt_tokens": None, "ttft_s": None,
                                   "prefill_tps": None, "decode_tps": None, "vram_peak_gib": None, "reason": None}
            if ep.max_model_len and size + cfg.output_tokens > ep.max_model_len:
                row["reason"] = (f"{size} + {cfg.output_tokens} output tokens exceed the served context "
                                 f"({ep.max_model_len})")
            else:
                words = max(8, int((size - TEMPLATE_SLACK) / per_word))
                _, prompt = Prompts(run_tag, ctx.cfg.seed, f"ctx{size}", words).make(int(ctx.reverse), 0)
                before = _vram(ctx) if gauge else None
                try:
                    t = _stream(ctx, prober, prompt, cfg.output_tokens)
                except httpx.HTTPError as exc:
                    row["reason"] = f"the request failed: {exc}"
                else:
                    row.update(prompt_tokens=t.prompt_tokens, ttft_s=_r(t.ttft, 4), decode_tps=_r(t.decode_tps()),
                               completion_tokens=t.completion_tokens)
                    if t.prompt_tokens and t.ttft:
                        row["prefill_tps"] = _r(t.prompt_tokens / t.ttft)
                if gauge:
                    readings = [v for v in (before, _vram(ctx)) if v is not None]
                    row["vram_peak_gib"] = max(readings) if readings else None
            rows[str(size)] = row
            metrics[f"throughput.ttft_s@{size}"] = row["ttft_s"]
            metrics[f"throughput.prefill_tps@{size}"] = row["prefill_tps"]
            metrics[f"throughput.decode_tps@{size}"] = row["decode_tps"]
    finally:
        prober.close()
    return metrics, {"by_context": rows, "tokens_per_word": round(per_word, 4), "run_tag": run_tag,
                     "order": contexts, "served_context": ep.max_model_len, "output_tokens": cfg.output_tokens,
                     "vram": "read around each request" if gauge else vram.NOT_EXPOSED}


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
