"""Every metric a fitness run can report, declared once: what it means, which way is
better, whether it may gate (judge metrics never do). Thresholds may only name these.

A metric measured per context size carries it after an `@`: `throughput.decode_tps@8192`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: Literal["higher", "lower"]
    meaning: str
    per_context: bool = False
    gates: bool = True  # False: advisory (judge metrics)


METRICS = {m.name: m for m in (
    Metric("telemetry.busy_requests", "requests", "lower", "requests running + waiting before any load"),
    Metric("telemetry.kv_usage_percent", "%", "lower", "KV cache in use before any load"),
    Metric("warmup.first_answer_s", "s", "lower", "seconds from the first request to its complete answer"),
    Metric("tooluse.wellformed_rate", "fraction", "higher",
           "asks answered with a streamed tool call: a known tool, arguments a JSON object with its required keys"),
    Metric("tooluse.expected_tool_rate", "fraction", "higher", "asks answered with the tool the ask names"),
    Metric("tooluse.stream_agreement_rate", "fraction", "higher",
           "asks whose streamed and non-streamed answers carry the same tool calls"),
    Metric("tooluse.text_answers", "asks", "lower", "asks answered with a tool call written as text"),
    Metric("tooluse.bfcl_accuracy", "fraction", "higher", "BFCL subset, scored by its own AST checker"),
    Metric("throughput.ttft_s", "s", "lower", "single request, time to first token", per_context=True),
    Metric("throughput.prefill_tps", "tok/s", "higher", "single request, prompt tokens / TTFT", per_context=True),
    Metric("throughput.decode_tps", "tok/s", "higher", "single request, decode tokens/s after the first",
           per_context=True),
    Metric("capacity.peak_output_tps", "tok/s", "higher", "highest aggregate output tok/s over the levels"),
    Metric("capacity.carried_concurrency", "requests", "higher",
           "highest level with no failure and p95 TTFT within capacity.ttft_slo_s"),
    Metric("capacity.worst_ttft_p95_s", "s", "lower", "highest p95 TTFT over the levels"),
    Metric("capacity.worst_itl_p95_ms", "ms", "lower", "highest p95 inter-token latency over the levels"),
    Metric("capacity.failed_requests", "requests", "lower", "failed requests over all levels"),
    Metric("capability.humaneval_accuracy", "fraction", "higher", "HumanEval pass@1 (greedy), sandboxed execution"),
    Metric("capability.gsm8k_accuracy", "fraction", "higher", "GSM8K sample, final number exact match"),
    Metric("capability.ifbench_accuracy", "fraction", "higher", "IFBench, strict instruction checks"),
    Metric("capability.humaneval_thinking_accuracy", "fraction", "higher",
           "HumanEval pass@1 in thinking mode (enable_thinking, temperature 1.0, top_p 0.95; capability.thinking)"),
    Metric("capability.lmeval_gsm8k_accuracy", "fraction", "higher",
           "GSM8K sample scored by lm-eval (/v1/completions, flexible-extract exact match; capability.lmeval)"),
    Metric("kl.sym_kl_mean", "nats", "lower",
           "teacher-forced, top-20: mean symmetric KL of the served model vs its reference quantization"),
    Metric("kl.sym_kl_p99", "nats", "lower", "p99 over positions of the symmetric KL"),
    Metric("kl.js_mean", "nats", "lower", "mean Jensen-Shannon divergence (bounded by ln 2)"),
    Metric("kl.top1_agreement", "fraction", "higher", "positions where both give the same most likely token"),
    # judge metrics are advisory: `gates=False` (the tables say so once)
    Metric("judge.checklist_rate", "fraction", "higher", "judge checklist items met", gates=False),
    Metric("judge.cross_agreement", "fraction", "higher", "agreement of a second judge", gates=False),
)}

_KEY = re.compile(r"^(?P<base>[a-z_]+\.[a-z0-9_]+)(?:@(?P<ctx>[1-9][0-9]*))?$")


def lookup(key: str) -> Metric | None:
    """The metric a key names (`throughput.decode_tps@512` names `throughput.decode_tps`)."""
    m = _KEY.match(key)
    if not m:
        return None
    metric = METRICS.get(m["base"])
    if metric is None or bool(m["ctx"]) != metric.per_context:
        return None
    return metric


def phase_of(key: str) -> str:
    return key.split(".", 1)[0]
