"""Figures of one load level from its requests, and the files a run leaves.

Percentiles are numpy's default linear interpolation between closest ranks
(Hyndman–Fan type 7, the same as `vllm bench serve` and Codendum's bench), over
successful requests only; `n` beside them is that count.

Files in `bench-results/<UTC>/`: `summary.csv` (one row per shape and level),
`summary.json` (`meta`: every parameter and the server's identity; `levels`: the
rows with their error counts), `requests.jsonl` (one line per request).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.atomic import write_atomic
from harness.load.client import Result
from harness.load.level_row import CSV_COLUMNS, LevelRow

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)"


@dataclass
class Peaks:
    """The highest running, waiting and KV usage seen by the sampler during a level."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    samples: int = 0

    def see(self, running: float | None, waiting: float | None, kv_usage: float | None) -> None:
        self.samples += 1
        self.running = _max(self.running, running)
        self.waiting = _max(self.waiting, waiting)
        self.kv_usage = _max(self.kv_usage, kv_usage)


@dataclass
class Level:
    """One (shape, concurrency) level as it ran."""

    shape: str
    concurrency: int
    target_input_tokens: int
    requests: list[tuple[int, str, Result]] = field(default_factory=list)  # (index, tag, result)
    wall_s: float = 0.0
    preemptions: float | None = None
    peaks: Peaks = field(default_factory=Peaks)
    idle_wait_s: float | None = None
    idle: bool | None = None  # None: not checked


def percentiles(values: list[float], ps: tuple[float, ...]) -> list[float | None]:
    if not values:
        return [None] * len(ps)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), ps, method="linear")]


def summarise(level: Level) -> dict[str, Any]:
    results = [r for _, _, r in level.requests]
    ok = [r for r in results if r.ok]
    wall = level.wall_s or None
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    output = [r.completion_tokens if r.completion_tokens is not None else r.chunks for r in ok]
    ttft = [r.ttft_s for r in ok]
    e2e = [r.e2e_s for r in ok]
    tpot = [t for r in ok if (t := r.tpot_s) is not None]
    itl = [g for r in ok for g in r.itl_s()]
    t50, t95, t99 = percentiles(ttft, (50, 95, 99))
    e50, e95 = percentiles(e2e, (50, 95))
    i50, i95, i99 = percentiles(itl, (50, 95, 99))
    row = {
        "shape": level.shape,
        "concurrency": level.concurrency,
        "requests": len(results),
        "succeeded": len(ok),
        "failed": len(results) - len(ok),
        "input_tokens_mean": _mean(prompt),
        "output_tokens_mean": _mean(output),
        "wall_time_s": _round(level.wall_s, 4),
        "request_throughput_rps": _round(len(ok) / wall, 4) if wall else None,
        "output_throughput_tok_s": _round(sum(output) / wall, 2) if wall else None,
        "total_throughput_tok_s": _round((sum(prompt) + sum(output)) / wall, 2) if wall else None,
        "ttft_p50_s": _round(t50, 6), "ttft_p95_s": _round(t95, 6), "ttft_p99_s": _round(t99, 6),
        "e2e_p50_s": _round(e50, 6), "e2e_p95_s": _round(e95, 6),
        "tpot_mean_ms": _round(_mean(tpot) * 1000, 4) if tpot else None,
        "itl_p50_ms": _ms(i50), "itl_p95_ms": _ms(i95), "itl_p99_ms": _ms(i99),
        "preemptions": level.preemptions,
        "kv_cache_peak_percent": _round(level.peaks.kv_usage * 100, 3) if level.peaks.kv_usage is not None else None,
        "running_peak": level.peaks.running,
        "waiting_peak": level.peaks.waiting,
    }
    row.update(
        errors=dict(Counter(r.error for r in results if not r.ok)),
        target_input_tokens=level.target_input_tokens,
        itl_samples=len(itl),
        usage_reported=sum(1 for r in ok if r.completion_tokens is not None),
        metrics_samples=level.peaks.samples,
        idle_before=level.idle,
        idle_wait_s=_round(level.idle_wait_s, 3),
    )
    return LevelRow(**row).model_dump()  # checked against the one declaration of a level's figures


def request_line(level: Level, index: int, tag: str, r: Result, t0_ns: int) -> dict[str, Any]:
    return {
        "shape": level.shape, "concurrency": level.concurrency, "index": index, "tag": tag,
        "ok": r.ok, "error": r.error, "detail": r.detail, "status": r.status,
        "start_s": _round((r.start_ns - t0_ns) / 1e9, 6),
        "ttft_s": _round(r.ttft_s, 6), "e2e_s": _round(r.e2e_s, 6),
        "tpot_ms": _round(r.tpot_s * 1000, 4) if r.tpot_s is not None else None,
        "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens, "chunks": r.chunks,
        "finish_reason": r.finish_reason,
        "itl_ms": [round(g * 1000, 4) for g in r.itl_s()],
    }


class ResultsDir:
    """bench-results/<UTC>/: created on the first level, rewritten after every level."""

    def __init__(self, root: Path, stamp: str) -> None:
        path = root / stamp
        n = 1
        while path.exists():
            n += 1
            path = root / f"{stamp}-{n}"
        self.path = path
        self.rows: list[dict[str, Any]] = []

    def add(self, level: Level, t0_ns: int) -> dict[str, Any]:
        self.path.mkdir(parents=True, exist_ok=True)
        row = summarise(level)
        self.rows.append(row)
        with open(self.path / "requests.jsonl", "a", encoding="utf-8") as f:
            for index, tag, r in sorted(level.requests, key=lambda x: x[0]):
                f.write(json.dumps(request_line(level, index, tag, r, t0_ns), separators=(",", ":")) + "\n")
        return row

    def write_summary(self, meta: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / "summary.json",
                     json.dumps({"meta": meta, "levels": self.rows}, indent=2, default=str) + "\n")
        table = io.StringIO()
        writer = csv.DictWriter(table, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomic(self.path / "summary.csv", table.getvalue())


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 3) if values else None


def _max(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None else max(a, b)


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 4) if seconds is not None else None
