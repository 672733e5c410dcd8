"""What the store shows of the mission's drive, as the run record keeps it (`verdicts.drive`
measures it)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class DriveFigures(BaseModel):
    """What the store shows of the scenario's drive (measured by the harness)."""

    user_agent: str  # the scenario's User-Agent prefix
    tagged_by: str = "user-agent"  # "harness key": traces tagged by the harness's drive; else the UA prefix
    requests: int = 0  # the drive's traces inside the mission window
    harness_drives: int | None = None  # drives the harness ran for the agent (`obs drive`); None: no drive server
    own_requests: int = 0  # traces served inside the window that are not the drive's: the agent's own traffic
    forged: int = 0  # of those, traces sent with the scenario's User-Agent but no valid tag
    start: datetime | None = None
    end: datetime | None = None
    problem: str | None = None  # why the run yields no row; None: the drive happened
