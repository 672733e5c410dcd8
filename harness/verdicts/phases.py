"""Phases and signals of a mission run, from the files the run itself leaves.

Phases come from the scenario's drive record: preflight = mission start → drive
start, drive = the drive's window, observation = drive end → mission end. Signals
are the four telemetry signals the agent queried with a non-empty result, from the
`obs` call log (an `obs sql` query counts for the signal of each table it reads).
Files read before the drive come from the run's opencode store.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from harness.verdicts.evidence import tables_of
from harness.opencode.store import store_copy
from harness.records.record import Phases

SIGNALS = ("traces", "metrics", "logs", "profiles")
SIGNAL_TABLES = {"traces": "spans", "metrics": "metrics", "logs": "logs", "profiles": "profiles"}
_PATH = re.compile(r"(?:^|[\s'\"=/])((?:\./)?src/[\w./-]+\.\w+)")


def _when(value) -> datetime | None:
    if not value:
        return None
    try:
        stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def read_phases(drive_record: Path | None, mission_start: datetime, mission_end: datetime) -> Phases:
    if drive_record is None or not drive_record.is_file():
        return Phases()
    try:
        return phases_from_drive_text(drive_record.read_text(), mission_start, mission_end)
    except OSError:
        return Phases()


def phases_from_drive_text(text: str, mission_start: datetime, mission_end: datetime) -> Phases:
    """Phases from a drive record's text (read by the caller, without following links)."""
    try:
        data = json.loads(text)
    except ValueError:
        return Phases()
    if not isinstance(data, dict):
        return Phases()
    start = _when(data.get("start") or data.get("started") or data.get("start_utc"))
    end = _when(data.get("end") or data.get("ended") or data.get("end_utc"))
    return phases_between(start, end, mission_start, mission_end)


def phases_between(start: datetime | None, end: datetime | None, mission_start: datetime,
                   mission_end: datetime) -> Phases:
    """Phases around a drive window (from the store's scenario requests, or a drive record)."""
    if start is None or end is None:
        return Phases()
    return Phases(drive_start=start, drive_end=end,
                  preflight_s=round((start - mission_start).total_seconds(), 1),
                  drive_s=round((end - start).total_seconds(), 1),
                  observation_s=round((mission_end - end).total_seconds(), 1))


def queried_signals(signal_log: Path | None) -> list[str]:
    """Signals with at least one successful query that returned rows."""
    if signal_log is None or not signal_log.is_file():
        return []
    return signals_from_log_text(signal_log.read_text(errors="replace"))


def signals_from_log_text(text: str) -> list[str]:
    """Signals from a query log's text (read by the caller, without following links)."""
    found: set[str] = set()
    for line in text.splitlines():
        try:
            call = json.loads(line)
        except ValueError:
            continue
        if not (isinstance(call, dict) and call.get("ok") and (call.get("rows") or 0) > 0):
            continue
        if call.get("signal") in SIGNALS:
            found.add(call["signal"])
        elif call.get("signal") == "sql":  # an `obs sql` query counts for each signal's table it reads
            # Each argument read with DuckDB's parser (the query is one of them; `sql`, `--limit`
            # and its number parse as no query): the tables it reads, never words in a comment.
            tables = set().union(*(tables_of(a) for a in call.get("args") or [] if isinstance(a, str)))
            found |= {signal for signal, table in SIGNAL_TABLES.items() if table in tables}
    return [s for s in SIGNALS if s in found]


INPUT_CAP = 4096  # characters of one tool call's input searched for the paths it reads
MAX_FILES = 200  # paths kept


def files_read_before(data_dir: Path, session_ids: list[str], before: datetime | None) -> list[str]:
    """Source files (under src/) the agent read with a tool before the drive started."""
    if before is None or not session_ids:
        return []
    cutoff = before.timestamp() * 1000
    marks = ",".join("?" * len(session_ids))
    seen: list[str] = []
    with store_copy(data_dir) as conn:
        try:
            # Row by row, each tool's input cut to what names a path (a write's whole content is never
            # read): the store is the agent's to fill (issue 60).
            rows = conn.execute(
                f"""SELECT json_extract(data, '$.tool') AS tool,
                           substr(json_extract(data, '$.state.input'), 1, {INPUT_CAP}) AS input,
                           json_extract(data, '$.state.time.start') AS started
                    FROM part WHERE session_id IN ({marks}) AND json_valid(data)
                      AND json_extract(data, '$.type') = 'tool'
                    ORDER BY id""", session_ids)
            for row in rows:
                if not isinstance(row["started"], (int, float)) or row["started"] >= cutoff:
                    continue
                for match in _PATH.finditer(str(row["input"] or "")):
                    path = match.group(1).removeprefix("./")
                    if path not in seen and len(seen) < MAX_FILES:
                        seen.append(path)
        except sqlite3.Error:
            return seen
    return seen
