"""One row of a results table, its cells as written, and the score read from them: what the
columns (`columns`) show and the loaders (`rows`) build."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.verdicts.scoring import Score, score_local, score_remote

DASH = "—"  # a cell with nothing to show


@dataclass
class Row:
    """One row of a table: its key cells, headline cells and detail cells, as written."""

    kind: str  # "remote" or "local"
    name: str  # the model id (remote) or the preset (local)
    effort: str
    cli: str
    where: str  # Provider (remote) or GPU (local)
    oddyssey: str
    confirmed_reported: str
    by_kind: str
    total: str
    accuracy: str
    seconds_per_confirmed: str
    cost: str | None = None  # remote only
    usd_per_confirmed: str | None = None  # remote only
    preflight: str = DASH
    drive: str = DASH
    observation: str = DASH
    turns: str = DASH
    median_turn: str = DASH
    input: str = DASH
    output: str = DASH
    cache: str = DASH
    signals: str = DASH
    planted_found: str | None = None  # local only
    date: str = DASH  # the day it was measured
    source: str | None = None  # where: a link (remote, hand-kept) or the run record (local)
    ended: str = DASH  # local: on its own, or stopped after its report
    engine: str = DASH  # local: the serving engine and version (and image)
    opencode: str = DASH  # local: opencode's version
    gpu_hours: str = DASH  # local: GPU-hours the unit billed
    gpu_price: str = DASH  # local: the environment's hourly price and its source
    trials: str = DASH  # local: "1", or K trials on one serve: the median trial and the spread
    capacity: str = DASH  # local: `launch --capacity`'s agents sustained, SLO and trace
    median_of: int | None = None  # local: the row is the median of this many trials with a row
    run_id: str | None = None
    unsandboxed: bool = False  # local only: the agent ran with --no-sandbox
    key_matcher_only: bool = False  # local only: no grader or person ever saw its findings
    serving: list[str] = field(default_factory=list)  # local only: SERVING_COLUMNS' cells
    score: Score = field(init=False)

    def __post_init__(self) -> None:
        if self.kind == "remote":
            self.score = score_remote(self.usd_per_confirmed, self.seconds_per_confirmed, self.total,
                                      self.accuracy, self.confirmed_reported)
        else:
            self.score = score_local(self.seconds_per_confirmed, self.total, self.accuracy,
                                     self.confirmed_reported)

    @property
    def confirmed(self) -> int:
        return int(self.confirmed_reported.split("/")[0])

    @property
    def reported(self) -> int:
        return int(self.confirmed_reported.split("/")[1])
