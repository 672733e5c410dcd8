"""What a matrix spent and which trials it has, read from the run records every time (the
state keeps a copy, never the truth): a serve's GPU-hours are on each of its trials' records
(the launch writes them at its destroy; a later command's sweep writes a dead launch's, from
the unit's life as the cloud reports it), and a trial is kept once its record is finished.
"""

from __future__ import annotations

from pathlib import Path

from harness.matrix.state import Attempt, Cell, MatrixState
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status, utcnow

# A trial whose record says it ran its mission to an end: kept on a resume, never served again.
FINISHED = (Status.ok, Status.void)


def load_records(paths: ProjectPaths, run_ids: list[str]) -> list[RunRecord]:
    """The records of these runs as they stand (a quota refusal's moved to `refused/`)."""
    out = []
    for run_id in run_ids:
        for path in (paths.run(run_id).record, paths.refused / run_id / "run.json"):
            if path.is_file():
                try:
                    out.append(RunRecord.load(path))
                except (OSError, ValueError):
                    pass
                break
    return out


def is_finished(rec: RunRecord) -> bool:
    return rec.status in FINISHED and rec.times.end is not None and rec.times.mission_start is not None


def serve_hours(records: list[RunRecord]) -> float:
    """One serve's GPU-hours: every trial's record carries the whole serve's (counted once)."""
    return max((r.gpu_hours or 0.0 for r in records), default=0.0)


def live_hours(records: list[RunRecord]) -> float:
    """A serve still running (or whose record is not closed yet): its GPU-hours so far."""
    if not records:
        return 0.0
    if any(r.gpu_hours is not None for r in records):
        return serve_hours(records)
    first = records[0]
    start = first.times.serve_start
    if start is None:
        return 0.0
    gpus = 1 if first.gpus is None else first.gpus  # known from its preflight on
    return max(0.0, ((first.times.destroyed or utcnow()) - start).total_seconds()) / 3600 * gpus


def complete_pending(paths: ProjectPaths, records: list[RunRecord], say=None) -> list[RunRecord]:
    """Trials whose launch died after their mission and before their collect (issue 61): their
    collect run now, nothing served (`llms-benchmark collect-pending`, in a process of its own,
    as a cell's launch runs); the records as they then stand."""
    import os
    import subprocess
    import sys

    from harness.launcher import pending
    from harness.records.record import COLLECT_PENDING

    out = []
    for rec in records:
        if rec.reason == COLLECT_PENDING and rec.times.destroyed is not None and \
                pending.is_pending(paths.run(rec.run_id).dir):
            entry = os.environ.get("LLMS_BENCHMARK_MATRIX_CELL")  # the cells' own entry (runner.CELL_ENTRY_VAR)
            argv = [sys.executable, *([entry] if entry else ["-m", "harness.cli"]), "collect-pending", rec.run_id]
            try:
                done = subprocess.run(argv, cwd=paths.root, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      env={**os.environ, "LLMS_BENCHMARK_ROOT": str(paths.root)}, timeout=900)
                if say is not None and done.returncode == 0:
                    say(f"{rec.run_id}: its launch died after its mission; collected, nothing served again")
            except subprocess.TimeoutExpired:
                pass
            reloaded = load_records(paths, [rec.run_id])
            rec = reloaded[0] if reloaded else rec
        out.append(rec)
    return out


def settle(paths: ProjectPaths, attempt: Attempt) -> list[RunRecord]:
    """The attempt's spending and finished trials copied from its records; returns them."""
    records = complete_pending(paths, load_records(paths, attempt.run_ids))
    attempt.gpu_hours = serve_hours(records)
    attempt.finished = [r.run_id for r in records if is_finished(r)]
    return records


def settle_state(root: Path, state: MatrixState) -> None:
    """Every ended attempt's spending from its records: the state agrees with them to the cent."""
    paths = ProjectPaths(root)
    for cell in state.cells:
        for attempt in cell.attempts:
            if attempt.pid is None and attempt.run_ids:
                settle(paths, attempt)


def kept_trials(root: Path, cell: Cell) -> list[RunRecord]:
    """The cell's finished trials over all its launches, in order."""
    paths = ProjectPaths(root)
    return [r for a in cell.attempts for r in load_records(paths, a.finished)]
