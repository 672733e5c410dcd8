"""How many concurrent agents a server sustains: a sweep of N copies under the SLO (slo.py).

A level is N copies of the trace (replay.py), measured `repeats` times (slo.Measure). Its verdict:

- invalid: a turn failed for a fault, not for load (`is_fault`: a connection refused, reset or
  cut, an HTTP status other than 429, a stream with no tokens). Said, and counted as neither a
  pass nor a fail: it ends the sweep, and where the server no longer answers (`alive`) the sweep
  says it died and why. A dead server never reads as a capacity; nor does a hung one: after any
  level that did not pass the server is asked once, and a server that no longer answers (or
  whose unit ended) makes that level invalid too, whatever its turns said.
- fail: a turn timed out or was refused as overload (HTTP 429), the level ran past its limit, or a
  figure is past its bound.
- pass: every turn completed, and TTFT and turn time are within the SLO's bounds: the pooled
  statistic, and with two or more repeats the upper end of its 95 % interval (Student t over
  the repeats' own statistics). The statistic is the p99 (numpy, linear) where every repeat
  measured enough turns for one (slo.min_turns), else the maximum, and `stat` says which.

Beside them, as AIPerf names its metrics: inter_token_latency ((turn - TTFT) / (tokens - 1), per
turn), request_throughput and output_token_throughput (completed measured turns and their tokens
per second of the measured window), goodput (turns meeting both bounds per second).

Stopping rule: levels in ascending order (given, or 1, 2, 4, ... up to `max_copies`); the sweep
stops at the first level that fails, then bisects between the last pass and it until they are
adjacent (at most log2(gap) more levels). Sustained = the largest level that passed with no
failing level at or below it; 0 when the first level fails. Levels above the first failure are
never run, so a noisy pass above a failure cannot raise the figure. An invalid level ends the
sweep there: the figure is then the passes below it, a lower bound, and the record says why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.load.agents.replay import ReplayResult, TurnResult
from harness.load.agents.slo import PERCENTILE, Measure, Slo, min_turns

__all__ = ["LevelStats", "Slo", "SweepResult", "default_levels", "is_fault", "sweep"]

MAX_LEVELS = 64  # levels one sweep may run, bisection included
OVERLOAD = ("timeout", "HTTP 429")  # a turn's error that says the server is busy, not broken
# two-sided 95 % Student t by degrees of freedom (repeats - 1), up to slo.MAX_REPEATS - 1
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093}


def is_fault(error: str | None) -> bool:
    """A failed turn's error is a fault (the server or the path to it broke) unless it is overload."""
    return (error or "unknown") not in OVERLOAD


def interval(values: list[float]) -> list[float] | None:
    """The 95 % interval of the mean of `values` (one a repeat, in seconds); None for fewer than two."""
    if len(values) < 2:
        return None
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.fmean(values)
    return [max(0.0, mean - half), mean + half]  # seconds: never below zero


def _pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), p)) if values else None


def _itl(t: TurnResult) -> float | None:
    if t.turn_s is None or t.ttft_s is None or not t.completion_tokens or t.completion_tokens < 2:
        return None
    return (t.turn_s - t.ttft_s) / (t.completion_tokens - 1)


def _window(result: ReplayResult, measured: list[TurnResult]) -> float | None:
    """Seconds the measured turns are counted over: the steady window, else their own span."""
    if result.window_s:
        return result.window_s
    ends = [t.end_s for t in measured if t.end_s is not None]
    if not measured or not ends:
        return None
    span = max(ends) - min(t.start_s for t in measured)
    return span if span > 0 else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


@dataclass
class LevelStats:
    copies: int
    turns: int  # measured turns, every repeat
    failed: int  # failed turns, warm-up included: faults and overload
    ttft_p50_s: float | None
    ttft_p99_s: float | None  # the statistic `stat` names: the p99, or the max of too few turns
    turn_p50_s: float | None
    turn_p99_s: float | None
    decode_p50_tok_s: float | None
    think_error_p50_s: float | None  # |kept - recorded| think time, median over turns that had one
    timed_out: bool = False
    errors: dict[str, int] = field(default_factory=dict)  # failed turns by the client's error type
    server: dict | None = None  # the server's /metrics over the level (watch.py): prefix hit, KV peak, ...
    passed: bool = False
    why: str = ""
    verdict: str = ""  # pass, fail, or invalid (a fault: neither)
    faults: int = 0  # failed turns that were not overload (is_fault)
    stat: str = "p99"  # or "max": too few turns for a p99
    percentile: float = PERCENTILE
    repeats: int = 1
    ttft_by_repeat_s: list[float] = field(default_factory=list)
    turn_by_repeat_s: list[float] = field(default_factory=list)
    ttft_interval_s: list[float] | None = None  # 95 % over the repeats
    turn_interval_s: list[float] | None = None
    # AIPerf's names: inter_token_latency per turn, throughputs and goodput per second of the window
    inter_token_latency_p50_s: float | None = None
    inter_token_latency_p99_s: float | None = None
    request_throughput_per_s: float | None = None
    output_token_throughput_per_s: float | None = None
    goodput_per_s: float | None = None
    window_s: float | None = None  # the measured window, mean over repeats
    warmup_turns: int = 0  # sent in the warm-up, not measured

    @classmethod
    def of(cls, results: ReplayResult | list[ReplayResult], slo: Slo | None = None) -> LevelStats:
        runs = [results] if isinstance(results, ReplayResult) else list(results)
        p = slo.percentile if slo else PERCENTILE
        every = [t for r in runs for t in r.turns]
        measured = [[t for t in r.turns if t.measured] for r in runs]
        ok_by = [[t for t in m if t.ok] for m in measured]
        ok = [t for m in ok_by for t in m]
        errors: dict[str, int] = {}
        for t in every:
            if not t.ok:
                errors[t.error or "unknown"] = errors.get(t.error or "unknown", 0) + 1
        ttft_by = [[t.ttft_s for t in m if t.ttft_s is not None] for m in ok_by]
        turn_by = [[t.turn_s for t in m if t.turn_s is not None] for m in ok_by]
        enough = min((len(v) for v in ttft_by), default=0) >= min_turns(p)
        stat = f"p{p:g}" if enough else "max"

        def value(xs: list[float]) -> float | None:
            return (_pct(xs, p) if enough else max(xs)) if xs else None

        ttft_rep = [v for v in map(value, ttft_by) if v is not None]
        turn_rep = [v for v in map(value, turn_by) if v is not None]
        ttft = [v for xs in ttft_by for v in xs]
        turn = [v for xs in turn_by for v in xs]
        itl = [v for v in map(_itl, ok) if v is not None]
        dec = [t.decode_tok_s for t in ok if t.decode_tok_s is not None]
        think = [abs(t.think_s - t.think_target_s) for t in ok
                 if t.think_s is not None and t.think_target_s is not None]
        windows, req, out_tok, good = [], [], [], []
        for r, m, good_turns in zip(runs, measured, ok_by, strict=True):
            w = _window(r, m)
            if w is None:
                continue
            windows.append(w)
            req.append(len(good_turns) / w)
            out_tok.append(sum(t.completion_tokens or 0 for t in good_turns) / w)
            if slo is not None:
                good.append(sum(1 for t in good_turns if t.ttft_s is not None and t.turn_s is not None
                                and t.ttft_s <= slo.ttft_p99_s and t.turn_s <= slo.turn_p99_s) / w)
        return cls(copies=runs[0].copies, turns=sum(len(m) for m in measured),
                   failed=sum(1 for t in every if not t.ok), faults=sum(1 for t in every if not t.ok and is_fault(t.error)),
                   errors=errors, ttft_p50_s=_pct(ttft, 50), ttft_p99_s=value(ttft), turn_p50_s=_pct(turn, 50),
                   turn_p99_s=value(turn), decode_p50_tok_s=_pct(dec, 50), think_error_p50_s=_pct(think, 50),
                   timed_out=any(r.timed_out for r in runs), stat=stat, percentile=p, repeats=len(runs),
                   ttft_by_repeat_s=ttft_rep, turn_by_repeat_s=turn_rep, ttft_interval_s=interval(ttft_rep),
                   turn_interval_s=interval(turn_rep), inter_token_latency_p50_s=_pct(itl, 50),
                   inter_token_latency_p99_s=_pct(itl, 99), request_throughput_per_s=_mean(req),
                   output_token_throughput_per_s=_mean(out_tok), goodput_per_s=_mean(good) if slo else None,
                   window_s=_mean(windows), warmup_turns=len(every) - sum(len(m) for m in measured))

    def judge(self, slo: Slo) -> LevelStats:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items()))
        if self.faults:
            self.passed, self.verdict = False, "invalid"
            self.why = (f"invalid: {self.faults} turn{'s' if self.faults != 1 else ''} failed for a fault, not load "
                        f"({kinds}); neither a pass nor a fail")
            return self
        reasons = []
        if self.failed or self.timed_out or not self.turns:
            reasons.append(f"{self.failed} failed turns" + (f" ({kinds})" if kinds else "")
                           + (", timed out" if self.timed_out else ""))
        for name, point, band, bound in (("TTFT", self.ttft_p99_s, self.ttft_interval_s, slo.ttft_p99_s),
                                         ("turn", self.turn_p99_s, self.turn_interval_s, slo.turn_p99_s)):
            label = f"{name} {self.stat}"
            if point is None:
                reasons.append(f"{label} none measured > {bound:g} s")
            elif point > bound:
                reasons.append(f"{label} {point:.2f} s > {bound:g} s")
            elif band is not None and band[1] > bound:
                reasons.append(f"{label} {point:.2f} s, but its 95 % interval {band[0]:.2f}-{band[1]:.2f} s "
                               f"reaches past {bound:g} s")
        self.passed = not reasons
        self.verdict = "pass" if self.passed else "fail"
        note = "" if self.stat != "max" else f" (max of {self.turns} turns: too few for a p{self.percentile:g})"
        self.why = ("; ".join(reasons) or "within the SLO") + note
        return self


@dataclass
class SweepResult:
    slo: str
    rule: str
    sustained: int
    levels: list[LevelStats] = field(default_factory=list)
    limit_found: bool = False  # a level failed; else `sustained` is only the most tried, a lower bound
    ended_by: str | None = None  # an invalid level ended the sweep: why (a fault; a dead server)
    slo_def: dict = field(default_factory=dict)  # the SLO's bounds, percentile, whether the product's
    measure: dict = field(default_factory=dict)  # duration, warm-up, repeats

    @property
    def figure(self) -> int | None:
        """The agents sustained; None where the sweep ended invalid before any level passed."""
        return None if self.ended_by and not self.sustained else self.sustained

    def as_dict(self) -> dict:
        return {"slo": self.slo, "rule": self.rule, "sustained": self.sustained, "limit_found": self.limit_found,
                "ended_by": self.ended_by, "slo_def": self.slo_def, "measure": self.measure,
                "levels": [asdict(level) for level in self.levels]}

    def headline(self) -> str:
        if self.ended_by and not self.sustained:
            return f"no capacity figure: the sweep ended, {self.ended_by}"
        if self.ended_by:
            return (f">= {self.sustained} agents sustained (a lower bound: the sweep ended, {self.ended_by}) "
                    f"under {self.slo}")
        most = "" if self.limit_found else " (the most tried: the limit is higher)"
        return f"{self.sustained} agents sustained{most} under {self.slo}"


RULE = ("ascending levels, stop at the first failing one, bisect between the last pass and it; "
        "sustained = largest passing level below the first failure; an invalid level (a fault) ends the sweep")


def default_levels(max_copies: int) -> list[int]:
    levels, n = [], 1
    while n < max_copies:
        levels.append(n)
        n *= 2
    return levels + [max_copies]


class _Ended(Exception):
    pass


def sweep(run_level: Callable[[int], LevelStats], levels: list[int], slo: Slo, *, bisect: bool = True,
          on_level: Callable[[LevelStats], None] | None = None, alive: Callable[[], str | None] | None = None,
          measure: Measure | None = None) -> SweepResult:
    """Run levels by the stopping rule above; `run_level(n)` measures n concurrent copies; `alive()`
    says why the server is gone (None: it answers), asked after an invalid level."""
    levels = sorted(set(levels))
    if not levels or levels[0] < 1:
        raise ValueError("levels must be positive integers")
    out = SweepResult(slo=slo.describe(), rule=RULE, sustained=0, slo_def=slo.as_dict(),
                      measure=(measure or Measure()).as_dict())

    def run(n: int) -> bool:
        if len(out.levels) >= MAX_LEVELS:
            raise RuntimeError(f"more than {MAX_LEVELS} levels in one sweep")
        stats = run_level(n).judge(slo)
        # a level that did not pass may have met a dead or hung server (its turns timed out, which
        # reads as overload): asked once, a server that no longer answers makes the level invalid
        dead = alive() if alive is not None and not stats.passed else None
        if dead and stats.verdict != "invalid":
            stats.verdict = "invalid"
            stats.why = f"invalid: the server no longer answers ({stats.why}); neither a pass nor a fail"
        out.levels.append(stats)
        if on_level:
            on_level(stats)
        if stats.verdict == "invalid":
            out.ended_by = (f"the server died at {n} agents: {dead} ({stats.why})" if dead
                            else f"{n} agents {stats.why}")
            raise _Ended
        return stats.passed

    last_pass, first_fail = 0, None
    try:
        for n in levels:
            if run(n):
                last_pass = n
            else:
                first_fail = n
                break
        if bisect and first_fail is not None:
            lo, hi = last_pass, first_fail
            try:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if run(mid):
                        lo = mid
                    else:
                        hi = mid
            finally:
                last_pass = lo
    except _Ended:
        first_fail = None  # the limit is not known: what passed below is a lower bound
    out.sustained, out.limit_found = last_pass, first_fail is not None
    return out
