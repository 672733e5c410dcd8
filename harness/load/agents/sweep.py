"""How many concurrent agents a server sustains: a sweep of N copies under a stated SLO.

A level (N copies of the trace, replay.py) passes the SLO when every turn completed and
TTFT p99 <= `ttft_p99_s` and turn time p99 <= `turn_p99_s` (numpy percentiles, linear).

Stopping rule: levels are tried in ascending order (given, or 1, 2, 4, ... up to `max_copies`);
the sweep stops at the first level that fails. The capacity is then bisected between the
last passing level and that first failure until they are adjacent (`bisect`, at most
log2(gap) more levels). Sustained = the largest level that passed with no failing level at or
below it; 0 when the first level fails. Levels above the first failure are never run, so a
noisy pass above a failure cannot raise the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.load.agents.replay import ReplayResult, TurnResult

MAX_LEVELS = 64  # levels one sweep may run, bisection included


@dataclass(frozen=True)
class Slo:
    ttft_p99_s: float
    turn_p99_s: float

    def describe(self) -> str:
        return f"TTFT p99 <= {self.ttft_p99_s:g} s and turn time p99 <= {self.turn_p99_s:g} s, no failed turn"


def _secs(value: float | None) -> str:
    return "none measured" if value is None else f"{value:.2f} s"


def _pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), p)) if values else None


@dataclass
class LevelStats:
    copies: int
    turns: int
    failed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    turn_p50_s: float | None
    turn_p99_s: float | None
    decode_p50_tok_s: float | None
    think_error_p50_s: float | None  # |kept - recorded| think time, median over turns that had one
    timed_out: bool = False
    errors: dict[str, int] = field(default_factory=dict)  # failed turns by the client's error type
    server: dict | None = None  # the server's /metrics over the level (watch.py): prefix hit, KV peak, ...
    passed: bool = False
    why: str = ""

    @classmethod
    def of(cls, result: ReplayResult) -> LevelStats:
        ok: list[TurnResult] = [t for t in result.turns if t.ok]
        ttft = [t.ttft_s for t in ok if t.ttft_s is not None]
        turn = [t.turn_s for t in ok if t.turn_s is not None]
        dec = [t.decode_tok_s for t in ok if t.decode_tok_s is not None]
        think = [abs(t.think_s - t.think_target_s) for t in ok
                 if t.think_s is not None and t.think_target_s is not None]
        errors: dict[str, int] = {}
        for t in result.turns:
            if not t.ok:
                errors[t.error or "unknown"] = errors.get(t.error or "unknown", 0) + 1
        return cls(copies=result.copies, turns=len(result.turns), failed=len(result.turns) - len(ok), errors=errors,
                   ttft_p50_s=_pct(ttft, 50), ttft_p99_s=_pct(ttft, 99), turn_p50_s=_pct(turn, 50),
                   turn_p99_s=_pct(turn, 99), decode_p50_tok_s=_pct(dec, 50), think_error_p50_s=_pct(think, 50),
                   timed_out=result.timed_out)

    def judge(self, slo: Slo) -> LevelStats:
        faults = []
        if self.failed or self.timed_out or not self.turns:
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items()))
            faults.append(f"{self.failed} failed turns" + (f" ({kinds})" if kinds else "")
                          + (", timed out" if self.timed_out else ""))
        if self.ttft_p99_s is None or self.ttft_p99_s > slo.ttft_p99_s:
            faults.append(f"TTFT p99 {_secs(self.ttft_p99_s)} > {slo.ttft_p99_s:g} s")
        if self.turn_p99_s is None or self.turn_p99_s > slo.turn_p99_s:
            faults.append(f"turn p99 {_secs(self.turn_p99_s)} > {slo.turn_p99_s:g} s")
        self.passed, self.why = not faults, "; ".join(faults) or "within the SLO"
        return self


@dataclass
class SweepResult:
    slo: str
    rule: str
    sustained: int
    levels: list[LevelStats] = field(default_factory=list)
    limit_found: bool = False  # a level failed; else `sustained` is only the most tried, a lower bound

    def as_dict(self) -> dict:
        return {"slo": self.slo, "rule": self.rule, "sustained": self.sustained, "limit_found": self.limit_found,
                "levels": [asdict(level) for level in self.levels]}

    def headline(self) -> str:
        most = "" if self.limit_found else " (the most tried: the limit is higher)"
        return f"{self.sustained} agents sustained{most} under {self.slo}"


RULE = ("ascending levels, stop at the first failing one, bisect between the last pass and it; "
        "sustained = largest passing level below the first failure")


def default_levels(max_copies: int) -> list[int]:
    levels, n = [], 1
    while n < max_copies:
        levels.append(n)
        n *= 2
    return levels + [max_copies]


def sweep(run_level: Callable[[int], LevelStats], levels: list[int], slo: Slo, *, bisect: bool = True,
          on_level: Callable[[LevelStats], None] | None = None) -> SweepResult:
    """Run levels by the stopping rule above; `run_level(n)` measures n concurrent copies."""
    levels = sorted(set(levels))
    if not levels or levels[0] < 1:
        raise ValueError("levels must be positive integers")
    out = SweepResult(slo=slo.describe(), rule=RULE, sustained=0)

    def measure(n: int) -> bool:
        if len(out.levels) >= MAX_LEVELS:
            raise RuntimeError(f"more than {MAX_LEVELS} levels in one sweep")
        stats = run_level(n).judge(slo)
        out.levels.append(stats)
        if on_level:
            on_level(stats)
        return stats.passed

    last_pass, first_fail = 0, None
    for n in levels:
        if measure(n):
            last_pass = n
        else:
            first_fail = n
            break
    if bisect and first_fail is not None:
        lo, hi = last_pass, first_fail
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if measure(mid):
                lo = mid
            else:
                hi = mid
        last_pass = lo
    out.sustained, out.limit_found = last_pass, first_fail is not None
    return out
