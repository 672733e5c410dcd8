"""The stages that read what the agent left (opencode's store, the mission's files): they run
once the unit is destroyed, so no hostile store or folder the agent left bills GPU time
(a trigger-laden store once held the unit 658 s more). Everything they need from the live
server (its /metrics timeline, its pace, its log) was taken while the mission ran.

Each trial whose stages all ran is collected here, in trial order; a trial stopped earlier
keeps the status its stop gave it. SIGINT/SIGTERM here stops the collecting: the trial it
lands in, and those after it, are faults with the signal named (the post-run's scrub still
runs on every folder). A launch killed here leaves each record saying its collect did not
finish (there is no unit left for a later command to find)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import Interrupted, UserError
from harness.run import failpoint
from harness.records.record import COLLECT_PENDING as NOT_FINISHED
from harness.records.record import RunRecord, Status, utcnow
from harness.run.units import interruptible
from harness.stages.context import LaunchContext


@dataclass(frozen=True)
class AfterStage:
    name: str
    run: Callable[[RunRecord, LaunchContext], None]


def mark_pending(record: RunRecord) -> None:
    """A record whose collect is still to come, as it must read if the launch dies before it."""
    record.status, record.stopped_at, record.reason = Status.fault, "collect", NOT_FINISHED


def collect_all(stages: tuple[AfterStage, ...], due: list[tuple[RunRecord, LaunchContext]]) -> None:
    """`stages` on each trial in `due`, in order; the record on disk says fault until its own end."""
    for record, ctx in due:  # on disk first: a SIGKILL in a later trial's collect leaves no `ok` unsaid
        mark_pending(record)
        record.save(ctx.paths.dir)
    stopped: str | None = None
    try:
        with interruptible():
            for record, ctx in due:
                if stopped is not None:
                    record.reason = f"not collected: {stopped} before its collect"
                    continue
                stopped = _collect_one(stages, record, ctx)
    except Interrupted as exc:  # between two trials: the next trials are left as saved
        for record, _ in due:
            if record.reason == NOT_FINISHED:
                record.reason = f"not collected: {exc} before its collect"


def _collect_one(stages: tuple[AfterStage, ...], record: RunRecord, ctx: LaunchContext) -> str | None:
    """One trial's collect; what interrupted it, if a signal did."""
    record.times.collected = utcnow()  # after `times.destroyed`: what a test holds the order to
    name = stages[0].name
    try:
        for stage in stages:
            name = stage.name
            failpoint.hit(stage.name, record.trial.index if record.trial else 1)
            stage.run(record, ctx)
    except UserError as exc:
        record.status, record.stopped_at, record.reason = Status.refused, name, exc.render()
    except Interrupted as exc:
        record.status, record.stopped_at, record.reason = Status.fault, name, str(exc)
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a harness bug: the traceback kept next to the record
        ctx.paths.fault.write_text(traceback.format_exc())
        record.status, record.stopped_at = Status.fault, name
        record.reason = f"{type(exc).__name__}: {exc} (traceback in fault.txt)"
    return None
