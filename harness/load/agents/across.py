"""A capacity figure across launches (issue 61): what one serve's sweep found is one draw.

Two launches of the same replay preset under one tight SLO read 1 and 6 agents sustained, both
"limit found": each sweep's interval (Student t over its own repeats) is a statement about that
serve only. Here the launches of one preset, effort, CLI and GPU cell under one SLO are read
together:

- each launch brackets the capacity: at least the level it sustained, below the first level it
  failed (no upper end when it found no limit);
- the launches agree when their brackets overlap and, at every level two of them measured with
  repeats, their TTFT and turn-time intervals overlap too;
- agreeing launches give the overlap ("4 agents across 3 launches", "4-5 agents ..."); launches
  that disagree are "not repeatable", with each launch's figure; one launch says it is one.

Launches are told apart by their serve (a `--trials K` launch's trials share one sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.records.capacity import CapacityFigures


@dataclass
class Launch:
    name: str  # the serve's first run id
    figures: CapacityFigures

    @property
    def low(self) -> int | None:
        return self.figures.sustained

    @property
    def high(self) -> int | None:
        """The most agents this launch allows (its first failing level less one); None: no limit found."""
        failed = [lv.copies for lv in self.figures.levels if lv.verdict == "fail" or (not lv.passed and lv.verdict != "invalid")]
        if not self.figures.limit_found or not failed:
            return None
        return min(failed) - 1


@dataclass
class Across:
    launches: list[Launch]
    repeatable: bool
    low: int | None
    high: int | None
    disagreements: list[str] = field(default_factory=list)

    def cell(self) -> str:
        """The results page's cell (no `|`)."""
        n = len(self.launches)
        if n == 1:
            return f"{self.launches[0].figures.cell()}; one launch, not yet repeated"
        each = ", ".join(_figure(launch) for launch in self.launches)
        slo = self.launches[0].figures
        bounds = f"TTFT p99 ≤ {slo.ttft_p99_s:g}s, turn p99 ≤ {slo.turn_p99_s:g}s"
        if not self.repeatable:
            return f"not repeatable across {n} launches: {each} ({bounds}; {'; '.join(self.disagreements[:3])})"
        if self.high is None:
            figure = f"≥ {self.low}"
        elif self.high == self.low:
            figure = f"{self.low}"
        else:
            figure = f"{self.low}-{self.high}"
        return f"{figure} across {n} launches (each: {each}; {bounds})"


def _figure(launch: Launch) -> str:
    if launch.low is None:
        return "none"
    return f"{'' if launch.figures.limit_found else '≥ '}{launch.low}"


def _overlap(a: list[float] | None, b: list[float] | None) -> bool | None:
    if not a or not b:
        return None  # one repeat: no interval to compare
    return a[0] <= b[1] and b[0] <= a[1]


def same_slo(a: CapacityFigures, b: CapacityFigures) -> bool:
    return (a.ttft_p99_s, a.turn_p99_s) == (b.ttft_p99_s, b.turn_p99_s)


def workload(figures: CapacityFigures, mission: str | None) -> str:
    """What a sweep replayed, as far as launches can be compared on it: each launch's own sessions
    of one mission (the same work, its own draw of it), or one trace file given to all."""
    if figures.own_trace:
        return f"own sessions of the {mission or '?'} mission"
    return f"trace {figures.trace.split(' (from ', 1)[0].rsplit('/', 1)[-1]}"


def combine(launches: list[Launch]) -> Across:
    """The launches (one SLO) read together. A launch whose sweep gave no figure is left out."""
    launches = [launch for launch in launches if launch.low is not None]
    if not launches:
        raise ValueError("no launch with a capacity figure")
    low = max(launch.low for launch in launches)
    highs = [launch.high for launch in launches if launch.high is not None]
    high = min(highs) if highs else None
    problems = []
    if high is not None and low > high:
        most = max(launches, key=lambda launch: launch.low)
        least = min((launch for launch in launches if launch.high is not None), key=lambda launch: launch.high)
        problems.append(f"{most.name} sustained {most.low} where {least.name} failed at {least.high + 1}")
    for i, a in enumerate(launches):
        for b in launches[i + 1:]:
            at = {lv.copies: lv for lv in a.figures.levels}
            for lv in b.figures.levels:
                other = at.get(lv.copies)
                if other is None or "invalid" in (lv.verdict, other.verdict):
                    continue
                for what, x, y in (("TTFT", other.ttft_interval_s, lv.ttft_interval_s),
                                   ("turn time", other.turn_interval_s, lv.turn_interval_s)):
                    if _overlap(x, y) is False:
                        problems.append(f"at {lv.copies} agents the {what} intervals do not overlap "
                                        f"({x[0]:.2f}-{x[1]:.2f} s and {y[0]:.2f}-{y[1]:.2f} s)")
    return Across(launches, not problems, low, high if not problems else None, problems)
