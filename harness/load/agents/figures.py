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
    ttft_p99_s: float | None = None
    turn_p99_s: float | None = None
    why: str = ""


class CapacityFigures(BaseModel):
    """The serve's, shared by every trial of a `--trials K` launch (the sweep ran once, after them)."""

    sustained: int | None = None  # None: the sweep did not finish (see `error`)
    limit_found: bool = False  # a level failed; else `sustained` is the most tried, a lower bound
    slo: str = ""
    ttft_p99_s: float | None = None  # the SLO's bounds
    turn_p99_s: float | None = None
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

    def cell(self) -> str:
        """The results page's cell: the figure, its SLO and its trace (no `|`: a table cell)."""
        if self.sustained is None:
            return "— (sweep failed)"
        trace = "own sessions" if self.own_trace else f"trace {self.trace.rsplit('/', 1)[-1]}"
        return (f"{'' if self.limit_found else '≥ '}{self.sustained} (TTFT p99 ≤ {self.ttft_p99_s:g}s, "
                f"turn p99 ≤ {self.turn_p99_s:g}s; {trace})")

    def headline(self) -> str:
        if self.sustained is None:
            return f"no capacity: {self.error}"
        return f"{'' if self.limit_found else '>= '}{self.sustained} agents sustained under {self.slo}"
