"""A run's own telemetry store for the observability tests: the unfixed mission stack driven once,
as a launch drives it, and driven again when B01's race did not show.

B01 is a race (two orders placed at once share a reference): a drive may see none, most often a
short one on a loaded box (CI once drove 10 s x 2 users with no collision, while the controls had
3 and 5). An honest report can only claim what its run shows, and a fix can only be seen to turn
B01's evidence off on a run where it was on. So the tests that rule on a run store take one that
shows it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from harness.verdicts import controls as ctl

MISSION = Path(__file__).resolve().parents[1] / "missions" / "observability"
COLLISIONS = ("SELECT count(*) - count(DISTINCT attributes->>'$.\"shop.order.ref\"') FROM logs "
              "WHERE body = 'order placed'")
DRIVE_TRIES = 3


def collisions(store: Path) -> int:
    with duckdb.connect(str(store), read_only=True) as con:
        return int(con.execute(COLLISIONS).fetchone()[0] or 0)


def showing_b01(run_once: Callable[[], Path], what: str) -> Path:
    """The store `run_once()` makes, made again (at most DRIVE_TRIES times) until B01's race shows in it."""
    for _ in range(DRIVE_TRIES):
        store = run_once()
        if collisions(store) > 0:
            return store
    pytest.fail(f"{DRIVE_TRIES} {what} showed no order-reference collision (B01): the planted race did not "
                "manifest, so no run store to rule on")


def drive_showing_b01(store: Path, drive: dict | None = None) -> Path:
    """Drive the unfixed stack into `store` (replaced whole) until B01's race shows in it."""
    def once() -> Path:
        part = store.with_name(f".{store.name}.{os.getpid()}")
        part.unlink(missing_ok=True)
        ctl.drive_one(MISSION, [], part, drive)
        os.replace(part, store)
        return store

    return showing_b01(once, f"drives ({drive or 'the default drive'})")
