"""The replay server's vLLM-named `/metrics` and its served log (one line per request)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


# ---------------------------------------------------------------- metrics and the served log

# vLLM's own bucket edges, so dashboards and the harness read both the same way.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# vLLM 0.32's own label values (read from its /metrics); the replay finishes with the first three.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM 0.32 labels every engine figure with its engine index and the served name.
ENGINE = "0"


class Metrics:
    """vLLM's metric names, kept truthful for what this server does.

    A request counts as waiting until its first token (the scripted ttft stands in
    for queueing and prefill) and as running while it streams. KV-cache usage is
    simulated as the tokens held by in-flight requests over one max_model_len.
    """

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.registry = CollectorRegistry()
        self.max_model_len = max_model_len

        def make(kind: type, name: str, doc: str, **kw: Any) -> Any:
            return kind(name, doc, ["engine", "model_name"], registry=self.registry, **kw).labels(ENGINE, model_name)

        self.running = make(Gauge, "vllm:num_requests_running", "Requests streaming tokens.")
        self.waiting = make(Gauge, "vllm:num_requests_waiting", "Requests before their first token.")
        self.kv = make(Gauge, "vllm:kv_cache_usage_perc", "Simulated KV-cache usage (1 = 100%).")
        self.prompt = make(Counter, "vllm:prompt_tokens", "Prefill tokens processed.")
        self.generation = make(Counter, "vllm:generation_tokens", "Generation tokens processed.")
        self.preemptions = make(Counter, "vllm:num_preemptions", "Preemptions (never, here).")
        self.cache_queries = make(Counter, "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.cache_hits = make(Counter, "vllm:prefix_cache_hits", "Prompt tokens found there (the scripted cached_tokens).")
        # No queue here (every request runs at once); the scripted ttft is all prefill.
        self.queue_time = make(Histogram, "vllm:request_queue_time_seconds", "Time waiting (always 0 here).",
                               buckets=E2E_BUCKETS)
        self.prefill_time = make(Histogram, "vllm:request_prefill_time_seconds", "Time to first token.",
                                 buckets=E2E_BUCKETS)
        self.decode_time = make(Histogram, "vllm:request_decode_time_seconds", "First token to the end.",
                                buckets=E2E_BUCKETS)
        self.ttft = make(Histogram, "vllm:time_to_first_token_seconds", "Time to first token.", buckets=TTFT_BUCKETS)
        self.e2e = make(Histogram, "vllm:e2e_request_latency_seconds", "Request latency.", buckets=E2E_BUCKETS)
        success = Counter(
            "vllm:request_success", "Finished requests.", ["engine", "finished_reason", "model_name"],
            registry=self.registry,
        )
        self.success = {reason: success.labels(ENGINE, reason, model_name) for reason in FINISHED_REASONS}
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}

    def arrived(self) -> None:
        self.waiting.inc()

    def first_token(self, key: int, ttft: float, prompt_tokens: int, cached_tokens: int = 0) -> None:
        # Running first: a reader that sees no request running sees whole counters.
        self.running.inc()
        self.waiting.dec()
        self.ttft.observe(ttft)
        self.prompt.inc(prompt_tokens)
        self.cache_queries.inc(prompt_tokens)
        self.cache_hits.inc(cached_tokens)
        self._hold(key, prompt_tokens)

    def generated(self, key: int, tokens: int) -> None:
        if tokens:
            self.generation.inc(tokens)
            self._hold(key, tokens)

    def left(self, key: int, running: bool, finished_reason: str, e2e: float | None,
             ttft: float | None = None) -> None:
        # Observed before the request stops counting as running (see first_token).
        self.success[finished_reason].inc()
        if e2e is not None:
            self.e2e.observe(e2e)
            if ttft is not None:
                self.queue_time.observe(0.0)
                self.prefill_time.observe(ttft)
                self.decode_time.observe(max(0.0, e2e - ttft))
        (self.running if running else self.waiting).dec()
        with self._lock:
            self._held.pop(key, None)
            self._update_kv()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _hold(self, key: int, tokens: int) -> None:
        with self._lock:
            self._held[key] = self._held.get(key, 0) + tokens
            self._update_kv()

    def _update_kv(self) -> None:
        self.kv.set(min(1.0, sum(self._held.values()) / max(1, self.max_model_len)))


class ServedLog:
    """One JSON line per chat request: the ground truth tests compare measurements with."""

    def __init__(self, path: Path | None) -> None:
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - lives with the server

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

