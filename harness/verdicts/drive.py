"""The drive gate, kept by the harness: did the mission's scenario really drive the stack?

The scenario's own record (`scenario/drive.json`) lies in the agent's workspace, where
the agent can write it, so it proves nothing. The harness reads the drive from the run's
telemetry store instead, which only the services write (their ingest token): the server
spans whose `user_agent.original` starts with the scenario's User-Agent prefix, started
inside the mission's window. Their first start and last end are the drive's window; too
few of them and the run yields no row, its record saying why.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

MIN_REQUESTS = 20  # a 10-second, 2-user drive sends about 50; a handful of curls is not a drive

_SQL = """
SELECT count(*), min(start_ns), max(end_ns) FROM spans
WHERE kind = 'SERVER' AND starts_with(attributes->>'$."user_agent.original"', ?)
  AND start_ns >= ? AND start_ns <= ?
"""


class DriveFigures(BaseModel):
    """What the store shows of the scenario's drive (measured by the harness)."""

    user_agent: str  # the prefix looked for
    requests: int = 0  # scenario-tagged server spans inside the mission window
    start: datetime | None = None
    end: datetime | None = None
    problem: str | None = None  # why the run yields no row; None: the drive happened


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def _when(ns: int | None) -> datetime | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, tz=UTC)


def measure_drive(store: Path | None, user_agent: str, mission_start: datetime, mission_end: datetime) -> DriveFigures:
    figures = DriveFigures(user_agent=user_agent)
    if store is None or not Path(store).is_file():
        figures.problem = "the run kept no telemetry store, so the scenario's drive cannot be shown"
        return figures
    try:
        import duckdb

        with duckdb.connect(str(store), read_only=True) as con:
            n, first, last = con.execute(_SQL, [user_agent, _ns(mission_start), _ns(mission_end)]).fetchone()
    except Exception as exc:  # noqa: BLE001 - an unreadable store is a run without a shown drive, not a crash
        figures.problem = f"the telemetry store could not be read: {str(exc).splitlines()[0] if str(exc) else exc}"
        return figures
    figures.requests, figures.start, figures.end = int(n or 0), _when(first), _when(last)
    if figures.requests < MIN_REQUESTS:
        figures.problem = (f"the scenario never drove the stack inside the mission: {figures.requests} request(s) "
                           f"tagged {user_agent}* in the store (at least {MIN_REQUESTS} needed); "
                           "scenario/drive.json, which the agent can write, is not evidence")
    return figures
