"""The run record's `serving` section (pydantic models only: record.py imports them)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ToolCallHealth(BaseModel):
    calls: int = 0  # tool parts the agent's calls became (valid or not)
    leaked: int = 0  # calls written as text instead of tool_calls
    leaked_turns: list[str] = Field(default_factory=list)  # message ids
    malformed: int = 0  # arguments opencode could not parse or validate (its `invalid` tool)
    malformed_examples: list[str] = Field(default_factory=list)
    errors: int = 0  # tool parts that ended in error (failed commands included)
    finish_reasons: dict[str, int] = Field(default_factory=dict)
    compactions: int = 0


class ServingFigures(BaseModel):
    """What the serving did while the agent worked (the run window only)."""

    server: str = "unknown"  # vllm | llamacpp | unknown (from the metric names)
    readings: int = 0  # /metrics readings in the timeline
    turns: int = 0  # model calls of the session tree
    turns_exact: int = 0  # calls whose server figures are their own (no other call in the bracket)
    prefix_cache_hit: float | None = None  # 0..1
    prefix_cache_source: str | None = None  # "server" (its prefix-cache counters) or "usage" (cached/prompt tokens)
    context_p50: int | None = None  # prompt tokens of the mission's calls
    context_p90: int | None = None
    decode_tps_p50_context: float | None = None  # decode tok/s at the median call's context
    decode_tps_p90_context: float | None = None
    kv_peak: float | None = None  # 0..1, the highest KV-cache usage read
    preemptions: int | None = None
    queue_wait_p95_s: float | None = None
    prefill_p50_s: float | None = None
    tool_calls: ToolCallHealth = Field(default_factory=ToolCallHealth)
    gpu_hourly_usd: float | None = None  # the environment's price
    gpu_price_source: str | None = None  # where the environment says that price comes from, and its date
    gpu_cost_usd: float | None = None  # GPU-hours × price
    store_check: list[str] = Field(default_factory=list)  # store vs events vs server counters: mismatches named
    notes: list[str] = Field(default_factory=list)
