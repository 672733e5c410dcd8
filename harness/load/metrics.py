"""Read a serving engine's Prometheus `/metrics` into one small snapshot.

vLLM's current names come first, then the names it retired (0.9–0.11 renames), then
llama.cpp's. Counters and the running/waiting gauges are summed across label sets
(data-parallel engines add up); KV-cache usage is the max across engines, as a
fraction 0..1. Parsing uses prometheus_client's own parser.

    scrape("http://127.0.0.1:8000") -> MetricsSnapshot | None
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness.errors import UserError
from harness.wire.openai import bearer, root_url
from harness.wire.tls import tls

# Each figure: (candidate sample names, first found wins; how to fold its label sets).
# Sample names as exposed: a counter `vllm:foo` is exposed as `vllm:foo_total`.
FIGURES: dict[str, tuple[tuple[str, ...], Literal["sum", "max"]]] = {
    "running": (("vllm:num_requests_running", "llamacpp:requests_processing"), "sum"),
    "waiting": (("vllm:num_requests_waiting", "llamacpp:requests_deferred"), "sum"),
    "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"), "max"),
    "preemptions_total": (("vllm:num_preemptions_total", "vllm:num_preemptions"), "sum"),
    "prefix_cache_hits_total": (
        ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits",
         "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"), "sum"),
    "prefix_cache_queries_total": (
        ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries",
         "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"), "sum"),
    "prompt_tokens_total": (("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"), "sum"),
    "generation_tokens_total": (("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"), "sum"),
}
COUNTERS = ("preemptions_total", "prefix_cache_hits_total", "prefix_cache_queries_total",
            "prompt_tokens_total", "generation_tokens_total")


@dataclass
class MetricsSnapshot:
    """What one read of /metrics says. A figure the server does not expose is None."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1, the max across engines
    preemptions_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    server: str = "unknown"  # vllm | llamacpp | unknown
    raw: dict[str, float] = field(default_factory=dict)  # every sample name, summed over its label sets

    @property
    def busy(self) -> float | None:
        """Requests running plus waiting; None when the server exposes neither."""
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0) + (self.waiting or 0)

    def figures(self) -> dict[str, float | str | None]:
        """The named figures without `raw` (for tables and JSON lines)."""
        data = asdict(self)
        data.pop("raw")
        return data


WANTED = frozenset(name for names, _ in FIGURES.values() for name in names)


def _figure_lines(text: str) -> str:
    """Only the sample lines the figures read: a vLLM exposition with its histograms is
    long, and the sampler reads it every second beside streams being timed."""
    keep = []
    for line in text.splitlines():
        if line and line[0] != "#":
            end = line.find("{")
            if end < 0:
                end = line.find(" ")
            if line[:end] in WANTED:
                keep.append(line)
    return "\n".join(keep) + "\n"


def parse(text: str, *, figures_only: bool = False) -> MetricsSnapshot:
    """A snapshot of a Prometheus text exposition; raises ValueError if it does not parse.

    `figures_only` parses just the lines the named figures need (then `raw` holds only those).
    """
    if figures_only:
        text = _figure_lines(text)
    samples: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created") or math.isnan(sample.value):
                continue
            samples.setdefault(sample.name, []).append(float(sample.value))
    snap = MetricsSnapshot(raw={name: sum(values) for name, values in samples.items()
                                if not name.endswith("_bucket")})
    for figure, (names, how) in FIGURES.items():
        for name in names:
            if name in samples:
                setattr(snap, figure, max(samples[name]) if how == "max" else sum(samples[name]))
                break
    if any(name.startswith("vllm:") for name in samples):
        snap.server = "vllm"
    elif any(name.startswith("llamacpp:") for name in samples):
        snap.server = "llamacpp"
    return snap


def metrics_url(base_url: str) -> str:
    """`/metrics` at the server's root: a trailing `/v1` is dropped, a full `/metrics` URL kept."""
    url = base_url.rstrip("/")
    if url.endswith("/metrics"):
        return url
    return root_url(url) + "/metrics"


def scrape(base_url: str, *, api_key: str | None = None, timeout: float = 2.0,
           figures_only: bool = False) -> MetricsSnapshot | None:
    """Read and parse `/metrics`; None when the server is unreachable, refuses, or sends no exposition."""
    headers = bearer(api_key)
    try:
        resp = httpx.get(metrics_url(base_url), headers=headers, timeout=timeout, verify=tls())
        resp.raise_for_status()
        return parse(resp.text, figures_only=figures_only)
    except (httpx.HTTPError, ValueError, UnicodeDecodeError):
        return None


def generated_tokens(base_url: str, *, api_key: str | None = None) -> float | None:
    """The server's generated-token counter now (vLLM or llama.cpp); None if unreadable.
    Read twice around a step, it says whether the model produced anything meanwhile."""
    snap = scrape(base_url, api_key=api_key, timeout=10.0)
    return None if snap is None else snap.generation_tokens_total


def running_requests(base_url: str, *, api_key: str | None = None) -> float | None:
    """Requests the server holds now (running or waiting); None if unreadable."""
    snap = scrape(base_url, api_key=api_key, timeout=5.0)
    return None if snap is None else snap.busy


def delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None, figure: str) -> float | None:
    """How much a counter grew between two snapshots (None if either lacks it; a reset reads as None)."""
    if before is None or after is None:
        return None
    a, b = getattr(before, figure), getattr(after, figure)
    if a is None or b is None or b < a:
        return None
    return b - a


# ---------------------------------------------------------------- the `metrics` command


def read_once(base_url: str, *, api_key: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """One reading as a JSON-ready document; a UserError when /metrics cannot be read."""
    url = metrics_url(base_url)
    snap = scrape(base_url, api_key=api_key, timeout=timeout)
    if snap is None:
        raise UserError(f"cannot read {url} (unreachable, refused, or not a Prometheus exposition)", field="URL",
                        fix="give the server's base URL, e.g. http://127.0.0.1:8000 (vLLM and llama.cpp "
                            "serve /metrics there; llama.cpp needs --metrics)")
    figures = snap.figures()
    server = figures.pop("server")
    return {"timestamp": _now(), "url": url, "server": server, "figures": figures, "raw": snap.raw}


def timeline(base_url: str, interval: float, count: int | None, *, api_key: str | None = None,
             timeout: float = 5.0) -> Iterator[dict[str, Any]]:
    """A reading every `interval` seconds (on an absolute schedule), `count` of them (None: no end).

    Each line has the figures, plus the rates since the previous reading: output tokens/s and
    preemptions. The first reading must succeed (UserError otherwise); a later failure is a
    line with `reachable: false`.
    """
    first = read_once(base_url, api_key=api_key, timeout=timeout)
    url = first["url"]
    start = time.monotonic()
    prev: tuple[float, MetricsSnapshot] | None = None
    n = 0
    while count is None or n < count:
        if n:
            time.sleep(max(0.0, start + n * interval - time.monotonic()))
        taken = time.monotonic()
        snap = scrape(base_url, api_key=api_key, timeout=timeout)
        line: dict[str, Any] = {"timestamp": _now(), "url": url, "reachable": snap is not None}
        if snap is not None:
            line.update(snap.figures())
            if prev is not None:
                gen = delta(prev[1], snap, "generation_tokens_total")
                elapsed = taken - prev[0]
                line["output_tokens_per_s"] = round(gen / elapsed, 2) if gen is not None and elapsed > 0 else None
                line["preemptions_delta"] = delta(prev[1], snap, "preemptions_total")
            prev = (taken, snap)
        yield line
        n += 1


def line_text(line: dict[str, Any]) -> str:
    """One compact human line of a timeline reading."""
    if not line.get("reachable"):
        return f"{line['timestamp']} unreachable"

    def f(key: str, fmt: str = "g") -> str:
        value = line.get(key)
        return "-" if value is None else format(value, fmt)

    kv = line.get("kv_usage")
    return (f"{line['timestamp']} running={f('running')} waiting={f('waiting')} "
            f"kv={'-' if kv is None else format(kv * 100, '.1f') + '%'} out_tok/s={f('output_tokens_per_s', ',.1f')} "
            f"preempt+={f('preemptions_delta')} preempt={f('preemptions_total')}")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
