"""Sample the unit's `/metrics` while opencode runs: the run's serving timeline.

One JSON line per reading in `serving-timeline.jsonl`: the wall-clock time, why it was
taken (`start`, `tick`, `step` after an opencode step finished, `end`), the figures
`load/metrics.py` reads (vLLM current and retired names, llama.cpp's) and the histogram
sums/counts the per-turn join needs. Readings are taken every `interval_s` and, besides,
as soon as opencode reports a finished step: that reading falls between two model calls
of a sequential agent, so the join can give each call its own counter deltas.

Started right before opencode and stopped right after it: nothing is sampled outside the
run window. Bounded: at most `max_samples` readings, each with a short HTTP timeout.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from harness.load.metrics import MetricsSnapshot, scrape


# Histogram sums and counts (and llama.cpp's second counters) the join differences per turn.
EXTRA = (
    "vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count",
    "vllm:request_prefill_time_seconds_sum", "vllm:request_prefill_time_seconds_count",
    "vllm:request_decode_time_seconds_sum", "vllm:request_decode_time_seconds_count",
    "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
    "vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds_count",
    "llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "vllm:request_success_total",  # finished requests, every finish reason summed: how many calls a bracket holds
)  # fmt: skip


def reading(snap: MetricsSnapshot, t: float, reason: str, after: str | None) -> dict[str, Any]:
    line: dict[str, Any] = {"t": round(t, 4), "reason": reason}
    if after:
        line["after"] = after  # the opencode message whose step had just finished
    line.update(snap.figures())
    line["extra"] = {name: snap.raw[name] for name in EXTRA if name in snap.raw}
    return line


class Sampler:
    """A background thread reading /metrics into the timeline file until `stop()`."""

    def __init__(self, base_url: str, path: Path, *, api_key: str | None = None, interval_s: float = 2.0,
                 max_samples: int = 20_000, timeout_s: float = 2.0) -> None:
        self.base_url, self.path, self.api_key = base_url, Path(path), api_key
        self.interval_s, self.max_samples, self.timeout_s = interval_s, max_samples, timeout_s
        self.samples = 0
        self.unreadable = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pending: list[str] = []  # message ids whose step finished since the last reading
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._file = None

    # -- control ------------------------------------------------------------------------
    def start(self) -> Sampler:
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by stop()
        self._read("start")  # the run's first reading, before opencode sends anything
        self._thread = threading.Thread(target=self._loop, name="serving-timeline", daemon=True)
        self._thread.start()
        return self

    def on_event(self, event: dict[str, Any]) -> None:
        """opencode's JSON event stream: a finished step asks for a reading now."""
        if event.get("type") == "step_finish":
            part = event.get("part") or {}
            with self._lock:
                self._pending.append(str(part.get("messageID") or ""))
            self._wake.set()

    def stop(self) -> None:
        """The last reading (the run's end), then the thread and the file are closed."""
        if self._thread is None:
            return
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout=self.timeout_s * 3 + 5)
        self._thread = None
        self._read("end")
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        next_tick = time.monotonic() + self.interval_s
        while not self._stopping.is_set() and self.samples < self.max_samples:
            woke = self._wake.wait(max(0.0, next_tick - time.monotonic()))
            if self._stopping.is_set():
                return
            if woke:
                self._wake.clear()
                with self._lock:
                    pending, self._pending = self._pending, []
                # One reading per finished step, tagged with its message (two steps that end
                # before a reading share it; the join then sees they did).
                self._read("step", after=",".join(p for p in pending if p) or None)
            else:
                self._read("tick")
                next_tick += self.interval_s
                if next_tick < time.monotonic():  # a slow scrape: skip the missed ticks
                    next_tick = time.monotonic() + self.interval_s

    def _read(self, reason: str, after: str | None = None) -> None:
        if self.samples >= self.max_samples or self._file is None:
            return
        t = time.time()
        snap = scrape(self.base_url, api_key=self.api_key, timeout=self.timeout_s)
        if snap is None:
            self.unreadable += 1
            line: dict[str, Any] = {"t": round(t, 4), "reason": reason, "reachable": False}
            if after:
                line["after"] = after
        else:
            line = reading(snap, t, reason, after)
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()
        self.samples += 1


def load_timeline(path: Path) -> list[dict[str, Any]]:
    """The readings of a timeline file, in time order (unreadable lines skipped)."""
    out = []
    if not Path(path).is_file():
        return out
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
            out.append(item)
    return sorted(out, key=lambda x: x["t"])
