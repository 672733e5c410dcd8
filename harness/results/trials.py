"""K trials on one serve (`launch --trials K`) as one results row: the median trial's cells,
and the spread that says how much one trial can be trusted.

The row is the median trial by Scoring among the trials that made a row (ok, final rulings;
for an even count the lower of the two middle ones, so the row is always a real trial and
recomputable from its own cells). The `Trials` cell gives how many were asked, ran and made a
row (a trial that ran without a row is named with its status: a void trial is a measurement
too), the min–max of Confirmed and of Total, and from three trials with a row on a
distribution-free interval for the median Scoring (`median_interval`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from harness.records.record import RunRecord
from harness.verdicts.scoring import format_total, parse_total

# The confidence the interval aims at; with fewer than 6 trials min–max is the widest
# interval order statistics give, and its own (lower) coverage is stated instead.
TARGET_COVERAGE = 0.95


def median_interval(values: list[float]) -> tuple[float, float, float] | None:
    """A distribution-free confidence interval for the median of what `values` sample:
    (x_(j), x_(n+1−j)) covers it with probability 1 − 2·P(Binomial(n, ½) ≤ j−1), whatever the
    distribution (continuous). The largest j reaching TARGET_COVERAGE; where none does
    (n < 6), j = 1, the min–max, with its own coverage (n=3: 75 %, 4: 87.5 %, 5: 93.75 %).
    None below 3 values (min–max of two covers the median only half the time)."""
    n = len(values)
    if n < 3:
        return None
    ordered = sorted(values)

    def coverage(j: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2 ** n

    j = 1
    while j + 1 <= n // 2 and coverage(j + 1) >= TARGET_COVERAGE:
        j += 1
    return ordered[j - 1], ordered[n - j], coverage(j)


@dataclass(frozen=True)
class Member:
    """One trial of a group: its record and, when it made a row, its score, Confirmed and Total."""

    record: RunRecord
    score: float | None = None
    confirmed: int | None = None
    total: str | None = None

    @property
    def made_row(self) -> bool:
        return self.score is not None


def median_member(members: list[Member]) -> Member:
    """The median trial by Scoring among those with a row (the lower middle for an even count;
    ties by the shorter Total, then the earlier trial)."""
    rowed = sorted((m for m in members if m.made_row),
                   key=lambda m: (m.score, -parse_total(m.total), -m.record.trial.index))
    return rowed[(len(rowed) - 1) // 2]


def _span(low: str, high: str) -> str:
    return low if low == high else f"{low}–{high}"


def trials_cell(members: list[Member], median: Member) -> str:
    """`trial 2 of 3 (median of 3 with a row) · Confirmed 2–4 · Total 18m02s–25m40s ·
    Scoring 12.0–24.9 (75 % interval of the median)`."""
    asked = median.record.trial.of
    rowed = [m for m in members if m.made_row]
    parts = [f"trial {median.record.trial.index} of {asked} (median of {len(rowed)} with a row)"]
    without = Counter(m.record.status.value for m in members if not m.made_row)
    if without:
        parts.append("without a row: " + ", ".join(f"{n} {status}" for status, n in sorted(without.items())))
    if len(members) < asked:
        parts.append(f"{asked - len(members)} never ran")
    if len(rowed) >= 2:
        confirmed = sorted(m.confirmed for m in rowed)
        totals = sorted(parse_total(m.total) for m in rowed)
        parts.append(f"Confirmed {_span(str(confirmed[0]), str(confirmed[-1]))}")
        parts.append(f"Total {_span(format_total(totals[0]), format_total(totals[-1]))}")
    interval = median_interval([m.score for m in rowed])
    if interval is not None:
        low, high, cover = interval
        parts.append(f"Scoring {_span(f'{low:.1f}', f'{high:.1f}')} ({cover * 100:g} % interval of the median)")
    return " · ".join(parts)
