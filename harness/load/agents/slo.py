"""The product's service-level objective for agents, and how a level is measured against it:
the one definition `launch --capacity` and `load-agents` both default to, and both write on
the record (`Slo.as_dict`).

The bounds are per agent, as AA-AgentPerf states its tiers (anchors.md: TTFT <= 10 s): the
time to the first token of each turn, and the turn's whole time (request to last token), at
the 99th percentile over the level's measured turns. A percentile needs enough turns to be
one: p99 needs 100 (`min_turns`); with fewer, the level reports and judges its maximum and
says so (the stricter figure, never a p99 read off 12 values).

Measurement defaults (`Measure`) are one pass of each copy and one repeat: small, so a
launch's capacity costs minutes. A figure to publish runs steady state (`--duration`, after
`--warmup`, copies recycled) and repeats (`--repeats` >= 2), so it carries a 95 % interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import UserError

PERCENTILE = 99.0


@dataclass(frozen=True)
class Slo:
    ttft_p99_s: float
    turn_p99_s: float
    percentile: float = PERCENTILE

    @property
    def product(self) -> bool:
        return (self.ttft_p99_s, self.turn_p99_s, self.percentile) == (
            PRODUCT_SLO.ttft_p99_s, PRODUCT_SLO.turn_p99_s, PRODUCT_SLO.percentile)

    def describe(self) -> str:
        p = f"p{self.percentile:g}"
        return (f"TTFT {p} <= {self.ttft_p99_s:g} s and turn time {p} <= {self.turn_p99_s:g} s, no failed turn"
                + (" (the product's SLO)" if self.product else " (given, not the product's SLO)"))

    def as_dict(self) -> dict:
        return {"ttft_p99_s": self.ttft_p99_s, "turn_p99_s": self.turn_p99_s, "percentile": self.percentile,
                "product": self.product, "text": self.describe()}


# TTFT: AA-AgentPerf's per-agent tier; turn time: two minutes for one model call of an agent's turn
PRODUCT_SLO = Slo(ttft_p99_s=10.0, turn_p99_s=120.0)


def min_turns(percentile: float) -> int:
    """Turns a percentile needs to be more than the maximum: one in (100 - p) percent above it."""
    return math.ceil(100.0 / (100.0 - percentile)) if percentile < 100 else 1


@dataclass(frozen=True)
class Measure:
    """How one level is measured (the defaults are the product's, on both entry points)."""

    duration_s: float = 0.0  # 0: each copy replays the trace once; else copies recycle for this long
    warmup_s: float = 0.0  # before the measured window (duration_s > 0): turns started here are not counted
    repeats: int = 1  # runs of each level; >= 2 gives the figure a 95 % interval

    def describe(self) -> str:
        shape = ("one pass of each copy (no steady state)" if not self.duration_s else
                 f"{self.duration_s:g} s of steady state after {self.warmup_s:g} s of warm-up, copies recycled")
        return f"{shape}; {self.repeats} repeat{'s' if self.repeats != 1 else ''}" + (
            " (no interval)" if self.repeats < 2 else " (95 % interval over the repeats)")

    def as_dict(self) -> dict:
        return {"duration_s": self.duration_s, "warmup_s": self.warmup_s, "repeats": self.repeats,
                "text": self.describe()}


PRODUCT_MEASURE = Measure()
MAX_REPEATS = 20


def check_measure(duration: float, warmup: float, repeats: int, limit: float, *, prefix: str) -> Measure:
    """The steady-state options as one Measure, or one clear error naming the option."""
    for name, value in {"duration": duration, "warmup": warmup}.items():
        if value < 0:
            raise UserError(f"{prefix}{name} cannot be negative (got {value})", field=f"{prefix}{name}",
                            fix="give 0 or more seconds")
    if warmup and not duration:
        raise UserError(f"{prefix}warmup needs {prefix}duration: a warm-up precedes a steady window",
                        field=f"{prefix}warmup", fix=f"give {prefix}duration too, or drop {prefix}warmup")
    if not 1 <= repeats <= MAX_REPEATS:
        raise UserError(f"{prefix}repeats must be 1..{MAX_REPEATS} (got {repeats})", field=f"{prefix}repeats",
                        fix="give 3 for a figure with an interval")
    if duration and limit <= warmup + duration:
        raise UserError(f"{prefix}limit {limit:g} s leaves the turns in flight at the window's end no time "
                        f"(warm-up {warmup:g} s + duration {duration:g} s)", field=f"{prefix}limit",
                        fix=f"give {prefix}limit above {warmup + duration:g} s")
    return Measure(duration_s=duration, warmup_s=warmup, repeats=repeats)

