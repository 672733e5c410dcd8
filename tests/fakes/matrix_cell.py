"""A matrix cell's launch without the agent, for the matrix's tests on the Azure stack.

Run as `python matrix_cell.py launch local ENV PRESET EFFORT ...` (the matrix runs it in place
of `-m harness.cli` when LLMS_BENCHMARK_MATRIX_CELL names this file): the real console
command and the real launch loop (preflight, serve through the real Azure SDK, wait-ready,
the trials, destroy in the `finally`, the records, signals), with the stages that need a model
or opencode replaced: no probe, no smoke, and each trial's mission a pause of
MATRIX_CELL_TRIAL_S seconds that ends ok. opencode's own runs are covered elsewhere
(tests/test_matrix_e2e.py runs the real one on replay units).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import harness.launcher.launch as launch  # noqa: E402
from harness.records.record import RunOutcome, Status, utcnow  # noqa: E402

TRIAL_S = float(os.environ.get("MATRIX_CELL_TRIAL_S", "1.0"))


def _probed(rec, ctx) -> None:
    rec.times.probed = utcnow()


def _smoked(rec, ctx) -> None:
    rec.smoke, rec.times.smoked = "passed (stand-in: no agent)", utcnow()


def _nothing(rec, ctx) -> None:
    pass


def _mission(rec, ctx) -> None:
    rec.times.mission_start = utcnow()
    deadline = time.monotonic() + TRIAL_S
    while time.monotonic() < deadline:  # bounded; a signal lands between the sleeps
        time.sleep(0.05)
    rec.times.mission_end = utcnow()
    rec.run = RunOutcome(exit_code=0, events=1, report_found=True)


def _collected(rec, ctx) -> None:
    rec.status, rec.reason, rec.stopped_at = Status.ok, None, None


STAND_INS = {"probe": _probed, "smoke": _smoked, "configure": _nothing, "mission-setup": _nothing,
             "run": _mission, "collect": _collected}
launch.STAGES = tuple(replace(s, run=STAND_INS.get(s.name, s.run)) for s in launch.STAGES)
launch.AFTER_DESTROY = tuple(replace(s, run=STAND_INS.get(s.name, s.run)) for s in launch.AFTER_DESTROY)

if __name__ == "__main__":
    from harness.cli import main

    sys.argv[0] = "llms-benchmark"
    main()
