"""A run's own telemetry store for the observability tests: the unfixed mission stack driven once,
as a launch drives it, and driven again when B01's race did not show.

B01 is a race (two orders placed at once share a reference): a drive may see none, most often a
short one on a loaded box (CI once drove 10 s x 2 users with no collision, while the controls had
3 and 5). An honest report can only claim what its run shows, and a fix can only be seen to turn
B01's evidence off on a run where it was on. So the tests that rule on a run store take one that
shows it."""

from __future__ import annotations

import fcntl
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


def cached_store(drive: dict) -> Path:
    """The unfixed stack's store driven as `drive` says, kept in the machine's cache beside the
    control stores and keyed by the mission's hash (a changed mission drives a new one): every test
    module and every xdist worker that rules on a run store reads this one file, driven once per
    machine (issue 64: one observed run for every verdict test). One worker drives while the others
    wait on its lock: never two drives into one file."""
    store = (ctl.cache_root().parent / "test-stores" /
             f"observability-{ctl.mission_hash(MISSION)}-{float(drive['duration']):g}x{int(drive['vus'])}.duckdb")
    store.parent.mkdir(parents=True, exist_ok=True)
    with open(store.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not store.is_file() or collisions(store) == 0:  # B01 shows (the scenario's rushes make it)
            drive_showing_b01(store, drive)
    return store
