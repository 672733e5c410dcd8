"""A matrix's state: its cells, their launches (run ids), statuses and spending, written
atomically after every change to `.llms-benchmark/matrices/<name>/state.json`.

Re-running the same plan reads it back and continues: finished cells stay finished, a cell
interrupted or still queued runs again. One matrix process per plan at a time (a lock the
kernel releases if the holder dies).
"""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.record import utcnow


class CellStatus(StrEnum):
    pending = "pending"  # not started yet
    queued = "queued"  # Azure refused it for quota or capacity: tried again at `retry_at`
    running = "running"
    done = "done"  # every trial made a row (the launch exited 0)
    void = "void"  # ran, no row (exit 1)
    refused = "refused"  # preflight or smoke refused it (exit 2)
    fault = "fault"  # a harness fault, or a unit that failed to serve (exit 3)
    over_budget = "over-budget"  # not started (its bound did not fit), or stopped before the budget was passed
    gave_up = "gave-up"  # refused for quota/capacity `max_attempts` times
    interrupted = "interrupted"  # the matrix was stopped while it ran: runs again on resume

    @property
    def final(self) -> bool:
        return self in (CellStatus.done, CellStatus.void, CellStatus.refused, CellStatus.fault,
                        CellStatus.gave_up)


class Attempt(BaseModel):
    """One launch of a cell: `launch local ... --trials K` as its own process."""

    index: int
    started: datetime
    ended: datetime | None = None
    pid: int | None = None
    exit_code: int | None = None
    run_ids: list[str] = Field(default_factory=list)  # the trials' records, the first one first
    finished: list[str] = Field(default_factory=list)  # those trials whose record is finished: kept on resume
    gpu_hours: float = 0.0  # the serve's (shared by its trials: counted once), copied from its records
    reason: str | None = None
    log: str | None = None  # the launch's stderr, relative to the project root


class Cell(BaseModel):
    preset: str
    effort: str
    status: CellStatus = CellStatus.pending
    reason: str | None = None  # why it made no row (its non-conclusive reason), or why it waits
    retry_at: datetime | None = None
    attempts: list[Attempt] = Field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.preset}@{self.effort}"

    @property
    def gpu_hours(self) -> float:
        return sum(a.gpu_hours for a in self.attempts)

    @property
    def quota_refusals(self) -> int:
        return sum(1 for a in self.attempts if a.reason and a.reason.startswith("quota:"))

    @property
    def holds(self) -> int:
        """Launches refused because another launch (another matrix) serves the same preset."""
        return sum(1 for a in self.attempts if a.reason and a.reason.startswith("held:"))

    @property
    def transient_faults(self) -> int:
        return sum(1 for a in self.attempts if a.reason and a.reason.startswith("transient:"))

    @property
    def trials_finished(self) -> int:
        return sum(len(a.finished) for a in self.attempts)


class MatrixState(BaseModel):
    name: str
    identity: str  # the plan's (MatrixPlan.identity): a resume must agree with it
    environment: str
    mission: str
    trials: int
    created: datetime = Field(default_factory=utcnow)
    updated: datetime = Field(default_factory=utcnow)
    parallel: int = 1  # the cap this run used
    parallel_why: str = ""
    budget_usd: float | None = None
    gpu_hourly_usd: float | None = None
    runs: int = 0  # how many times the matrix was started on this state
    interrupted: str | None = None  # the signal that stopped the last run
    cells: list[Cell] = Field(default_factory=list)

    def cell(self, cell_id: str) -> Cell:
        return next(c for c in self.cells if c.id == cell_id)

    def spent_usd(self) -> float:
        return sum(c.gpu_hours for c in self.cells) * (self.gpu_hourly_usd or 0.0)


class StateFolder:
    """`.llms-benchmark/matrices/<name>/`: state.json, report.md, cells/<cell>-<n>.log."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.dir = root / ".llms-benchmark" / "matrices" / name
        self.state = self.dir / "state.json"
        self.report = self.dir / "report.md"
        self.cells = self.dir / "cells"
        self._lock = None

    def load(self) -> MatrixState | None:
        if not self.state.is_file():
            return None
        try:
            return MatrixState.model_validate_json(self.state.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            raise UserError(f"the matrix state cannot be read: {str(exc).splitlines()[0][:200]}", file=self.state,
                            fix="move it aside (the run records are untouched) or pass --fresh to start over") from None

    def save(self, state: MatrixState) -> None:
        state.updated = utcnow()
        write_atomic(self.state, state.model_dump_json(indent=2) + "\n")

    def lock(self) -> None:
        """Held for the process's life; a second matrix on the same plan is refused."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.dir / ".lock", "a")  # noqa: SIM115 - held until the process ends
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise UserError(f"the matrix {self.dir.name} is already running in another process", file=self.dir,
                            fix="wait for it, or stop it with Ctrl-C (it destroys what it served)") from None
        os.set_inheritable(fh.fileno(), False)
        self._lock = fh

    def archive(self) -> Path | None:
        """`--fresh`: the old state moves aside (never deleted: its run records stay)."""
        if not self.state.is_file():
            return None
        dest = self.dir / f"state-{utcnow():%Y%m%dT%H%M%SZ}.json"
        os.replace(self.state, dest)
        return dest
