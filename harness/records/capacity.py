"""What `launch --capacity` writes on the run record: the agents the serve sustained, under
which SLO, replaying which trace (harness/stages/capacity.py; the sweep is sweep.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class CapacityLevel(BaseModel):
    copies: int
    passed: bool
    turns: int
    failed: int
    ttft_p99_s: float | None = None  # the statistic `stat` names (p99, or the max of too few turns)
    turn_p99_s: float | None = None
    why: str = ""
    verdict: str = ""  # pass, fail, or invalid (a fault: neither)
    faults: int = 0
    stat: str = "p99"
    repeats: int = 1
    ttft_interval_s: list[float] | None = None  # 95 % over the repeats
    turn_interval_s: list[float] | None = None
    inter_token_latency_p50_s: float | None = None  # AIPerf's names
    request_throughput_per_s: float | None = None
    output_token_throughput_per_s: float | None = None
    goodput_per_s: float | None = None


class CapacityFigures(BaseModel):
    """The serve's, shared by every trial of a `--trials K` launch (the sweep ran once, after them)."""

    sustained: int | None = None  # None: the sweep did not finish, or ended invalid before a pass (see `error`)
    limit_found: bool = False  # a level failed; else `sustained` is the most tried, a lower bound
    ended_by: str | None = None  # an invalid level (a fault, a dead server) ended the sweep: why
    slo: str = ""
    ttft_p99_s: float | None = None  # the SLO's bounds
    turn_p99_s: float | None = None
    slo_def: dict = Field(default_factory=dict)  # the SLO as slo.py states it: bounds, percentile, the product's?
    measure: dict = Field(default_factory=dict)  # steady-state duration, warm-up, repeats
    rule: str = ""
    trace: str = ""  # which trace was replayed: the run's own wire log, or the file given
    own_trace: bool = True  # the run's own sessions (not a file given with --capacity-trace)
    sessions: int = 0
    turns_per_copy: int = 0
    exact_tokens: bool | None = None  # level 1's prompts sized on the server's tokenizer
    levels: list[CapacityLevel] = Field(default_factory=list)
    results: str | None = None  # every turn of every level, relative to the first trial's run folder
    started: datetime | None = None
    ended: datetime | None = None
    error: str | None = None  # why the sweep gave no figure (the quality row stands)
    host_load: list[float] = Field(default_factory=list)  # the host's 1-min load average at the start and end
    # the serve's speed probe again, just before the sweep (as the launch's, harness/probe.py): the replay
    # side's measure of the box, so realism compares timings each normalised by its own side's probe
    probe: dict | None = None

    def cell(self) -> str:
        """The results page's cell: the figure, its SLO and its trace (no `|`: a table cell)."""
        if self.sustained is None:
            return "— (sweep failed)"
        trace = "own sessions" if self.own_trace else f"trace {self.trace.rsplit('/', 1)[-1]}"
        how = ""
        if self.measure:
            steady = f"{self.measure.get('duration_s'):g} s steady" if self.measure.get("duration_s") else "one pass"
            reps = self.measure.get("repeats") or 1
            how = f"; {steady}, {reps} repeat{'s' if reps != 1 else ''}"
        ended = "; sweep ended by a fault" if self.ended_by else ""
        return (f"{'' if self.limit_found else '≥ '}{self.sustained} (TTFT p99 ≤ {self.ttft_p99_s:g}s, "
                f"turn p99 ≤ {self.turn_p99_s:g}s; {trace}{how}{ended})")

    def headline(self) -> str:
        if self.sustained is None:
            return f"no capacity: {self.error}"
        ended = f" (the sweep ended, {self.ended_by})" if self.ended_by else ""
        return f"{'' if self.limit_found else '>= '}{self.sustained} agents sustained{ended} under {self.slo}"
