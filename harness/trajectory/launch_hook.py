"""Every launch's run folder gets its `trajectory.json` (harness/launcher/launch.py's post-run).

Written before the post-run scrub walks the run folder: the scrub then redacts every form of
the run's secrets from it like from any text file of the run (and fails the run closed if it
cannot), so the trajectory needs no scrub of its own, and it is built from the store and
events as the agent left them (the scrub may rewrite the store's bytes). A trajectory that
cannot be built never turns a good run bad: the reason goes into the record's notes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.errors import UserError
from harness.records.paths import TRAJECTORY
from harness.records.record import RunRecord
from harness.sandbox.secret_forms import redact_text


def record_trajectory(record: RunRecord, run_dir: Path, say: Callable[[str], None], secrets: list[str]) -> None:
    """Write it for a run that reached its mission; name it in the record, or say why not in its notes."""
    if record.times.mission_start is None:
        return  # no agent ran: nothing to trace
    from harness.trajectory.atif_out import write_trajectory

    try:
        write_trajectory(run_dir)
        record.artifacts.trajectory = TRAJECTORY
        return
    except UserError as exc:
        why = exc.message
    except Exception as exc:  # noqa: BLE001 - a harness bug here must not end the post-run
        why = f"{type(exc).__name__} (a harness bug in harness/trajectory)"
    why = (redact_text(f"{TRAJECTORY} not written: {why}", secrets) or "").replace(f"{Path(run_dir).resolve()}/", "")
    record.notes.append(why[:500])
    say(f"WARNING: {why[:500]}")
