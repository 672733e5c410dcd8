"""The timed replay server's configuration (the schedule it keeps, the engines it pretends
to run) and its running state: what is running and waiting, the KV usage it reports, and
its own account of every request, so a client's error can be measured against it."""

from __future__ import annotations

import asyncio
import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


# ---------------------------------------------------------------- configuration and state


@dataclass
class Config:
    model: str
    ttft: float = 0.1
    itl: float = 0.01
    jitter: float = 0.0
    seed: int = 0
    max_running: int = 0  # 0: no limit, nothing ever waits
    kv_tokens: int = 262_144
    max_model_len: int = 131_072
    engines: int = 1
    flavor: str = "vllm"
    preempt_every: int = 0
    served_log: Path | None = None


@dataclass
class Engine:
    running: int = 0
    waiting: int = 0
    held: int = 0  # tokens held by running requests (prompt + generated so far)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    preemptions: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"length": 0, "abort": 0})


class State:
    """Everything /metrics and /admin report, changed only on the event loop's thread."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.engines = [Engine() for _ in range(cfg.engines)]
        self.arrivals = 0
        self.extra_running = 0
        self.extra_waiting = 0
        self.extra_preemptions = 0
        self.kv_override: float | None = None
        self.reset_stats()
        self.log = open(cfg.served_log, "a", encoding="utf-8") if cfg.served_log else None  # noqa: SIM115
        self.admission = asyncio.Semaphore(cfg.max_running) if cfg.max_running > 0 else None

    def reset_stats(self) -> None:
        """What /admin/stats summarises, from now on (the bench resets it before every run)."""
        self.lateness_ns = array("q")  # per written token after the first: actual write time minus its deadline
        self.late_first_ns = array("q")  # the same for first tokens
        self.ttft_actual_ns = array("q")  # per request: first token written minus request received
        self.itl_actual_ns = array("q")  # per gap: a token written minus the previous one
        self.itl_request_ns = array("q")  # per completed request: (last - first) / (tokens - 1)

    def kv_usage(self, engine: Engine) -> float:
        if self.kv_override is not None:
            return self.kv_override
        return min(1.0, engine.held / max(1, self.cfg.kv_tokens))

    def write_log(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.log.flush()

    def stats(self) -> dict[str, Any]:
        def summary(values: array) -> dict[str, Any]:
            if not values:
                return {"n": 0}
            import numpy as np  # only for the stats a timed run reports at its end (~45 ms to import)

            us = np.frombuffer(values, dtype=np.int64) / 1000.0
            p50, p99, p999 = np.percentile(us, [50, 99, 99.9])
            return {"n": len(values), "p50_us": round(float(p50), 1), "p99_us": round(float(p99), 1),
                    "p999_us": round(float(p999), 1), "max_us": round(float(us.max()), 1)}

        return {"arrivals": self.arrivals, "token_lateness": summary(self.lateness_ns),
                "first_token_lateness": summary(self.late_first_ns),
                "ttft_actual": summary(self.ttft_actual_ns), "itl_actual": summary(self.itl_actual_ns),
                "itl_request_mean": summary(self.itl_request_ns),
                "running": sum(e.running for e in self.engines), "waiting": sum(e.waiting for e in self.engines)}


