"""A matrix's launches read back from their run records: a launch's records by its first run id
(`records_of`), and a state resumed after the matrix that wrote it stopped or died (`prepare`):
a running cell whose launch is gone is read from what it recorded, and what is left runs again."""

from __future__ import annotations

from pathlib import Path

import psutil

from harness.errors import UserError
from harness.matrix.plan import MatrixPlan
from harness.matrix.spend import kept_trials, settle, settle_state
from harness.matrix.state import Attempt, Cell, CellStatus, MatrixState
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status, utcnow


def records_of(paths: ProjectPaths, first: str) -> list[RunRecord]:
    """A launch's records by its first run id: that run, and the trials grouped under it."""
    found: list[RunRecord] = []
    for folder in (paths.runs, paths.refused):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*/run.json")):
            if path.parent.name < first[:16]:
                continue  # run ids begin with their UTC start: a later trial's sorts after the first
            try:
                rec = RunRecord.load(path)
            except (OSError, ValueError):
                continue
            if rec.run_id == first or (rec.trial is not None and rec.trial.group == first):
                found.append(rec)
    return sorted(found, key=lambda r: r.trial.index if r.trial else 1)


def prepare(state: MatrixState, plan: MatrixPlan, root: Path | None = None) -> list[str]:
    """A resumed state made ready to run again: cells the plan gained are added, interrupted or
    over-budget ones (the budget may have changed) and queued ones go back to pending; a cell
    left `running` by a matrix that died is checked (its launch must have ended) and its
    launch's records read: what it billed and the trials it finished count. Every ended
    launch's spending is read again from its records. Returns notes."""
    notes = []
    known = {c.id for c in state.cells}
    for preset, effort in plan.cells():
        cell = Cell(preset=preset, effort=effort)
        if cell.id not in known:
            state.cells.append(cell)
    paths = ProjectPaths(root) if root is not None else None
    for cell in state.cells:
        if cell.status == CellStatus.running:
            attempt = cell.attempts[-1] if cell.attempts else None
            pid = attempt.pid if attempt else None
            if pid and psutil.pid_exists(pid):
                try:
                    alive = "launch" in " ".join(psutil.Process(pid).cmdline())
                except psutil.Error:
                    alive = False
                if alive:
                    raise UserError(f"cell {cell.id}'s launch (pid {pid}) from an earlier matrix run is still running",
                                    field="PLAN", fix=f"wait for it, or `kill -INT {pid}` (it destroys its unit), "
                                                      "then run the matrix again")
            cell.status = CellStatus.interrupted
            cell.reason = "the matrix process died while it ran (its unit, if any, is swept from the ledger)"
            if attempt is not None:
                attempt.pid = None
                attempt.ended = attempt.ended or utcnow()
                if paths is not None:
                    _read_dead_attempt(paths, root, state, cell, attempt)
            notes.append(f"{cell.id}: its launch ended with the matrix that started it; "
                         f"{cell.trials_finished} of {plan.trials} trial(s) finished, the rest run again")
        if cell.status in (CellStatus.interrupted, CellStatus.over_budget, CellStatus.queued):
            cell.status, cell.retry_at = CellStatus.pending, None
    if root is not None:
        settle_state(root, state)
    for cell in state.cells:  # every trial kept already: nothing to serve again
        if cell.status == CellStatus.pending and cell.attempts and cell.trials_finished >= plan.trials:
            kept = kept_trials(root, cell) if root is not None else []
            void = next((r for r in kept if r.status != Status.ok), None)
            cell.status = CellStatus.done if void is None else CellStatus.void
            cell.reason = None if void is None else void.reason
    return notes


def _read_dead_attempt(paths: ProjectPaths, root: Path, state: MatrixState, cell: Cell, attempt: Attempt) -> None:
    """A launch that died with the matrix: its run ids from its records (or its announce file)."""
    if not attempt.run_ids:
        announce = root / ".llms-benchmark" / "matrices" / state.name / "cells" / f"{cell.id}-{attempt.index}.run-id"
        if announce.is_file():
            attempt.run_ids = [announce.read_text().strip()]
    if attempt.run_ids:
        records = records_of(paths, attempt.run_ids[0])
        if records:
            attempt.run_ids = [r.run_id for r in records]
        settle(paths, attempt)
