"""The drive gate, kept by the harness: did the mission's scenario really drive the stack?

The scenario's own record (`scenario/drive.json`) lies in the agent's workspace, where
the agent can write it, so it proves nothing; nor does a User-Agent, which anyone can
send. The harness runs the scenario itself when the agent asks (`obs drive`, see
`drive_server`), with a per-run key the agent never sees: every trace id the drive sends
is a user and request number followed by an HMAC of them under that key. The gate reads
the run's telemetry store, which only the services write (their ingest token), and counts
the distinct traces whose ids carry a valid tag, started inside one of the harness's drives.
Their first start and last end are the drive's window; too few of them and the run yields
no row, its record saying why. Every other trace the services served inside the window
is the agent's own traffic: counted on the record, never part of the drive.

A mission run without a key (an older caller) falls back to the User-Agent prefix.
"""

from __future__ import annotations

import hashlib
import json
import hmac
from datetime import UTC, datetime
from pathlib import Path

from harness.records.drive import DriveFigures

MIN_REQUESTS = 20  # a 10-second, 2-user drive sends about 80; a handful of curls is not a drive
TAG_HEAD = 12  # hex digits of user and request number before the tag
TAG_LEN = 20  # hex digits of HMAC-SHA256

# Every server span the services recorded inside the mission's window: its trace, whether it
# carries the scenario's User-Agent, its start and end.
_SPANS = """
SELECT trace_id, coalesce(starts_with(attributes->>'$."user_agent.original"', ?), false), start_ns, end_ns
FROM spans WHERE kind = 'SERVER' AND trace_id IS NOT NULL AND start_ns >= ? AND start_ns <= ?
"""
SLACK_NS = 2_000_000_000  # clocks of one machine; a span starts a little after the harness sent its request


def tag(key: bytes, head: str) -> str:
    """The trace id the harness's drive sends for `head` (user and request number, 12 hex)."""
    return head + hmac.new(key, head.encode(), hashlib.sha256).hexdigest()[:TAG_LEN]


def tagged(key: bytes, trace_id: str) -> bool:
    if len(trace_id) != TAG_HEAD + TAG_LEN:
        return False
    return hmac.compare_digest(tag(key, trace_id[:TAG_HEAD]), trace_id.lower())


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def _when(ns: int | None) -> datetime | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, tz=UTC)


def measure_drive(store: Path | None, user_agent: str, mission_start: datetime, mission_end: datetime,
                  key: bytes | None = None, windows: list[tuple[datetime, datetime]] | None = None) -> DriveFigures:
    """With `key` (the harness ran the drives, in `windows`): a trace is the drive's when its id
    carries the key's tag and its spans start inside one of those drives; every other trace
    is the agent's own traffic (a tagged id replayed later included). Without: the UA prefix."""
    figures = DriveFigures(user_agent=user_agent, tagged_by="harness key" if key else "user-agent",
                           harness_drives=None if windows is None else len(windows))
    if store is None or not Path(store).is_file():
        figures.problem = "the run kept no telemetry store, so the scenario's drive cannot be shown"
        return figures
    try:
        import duckdb

        with duckdb.connect(str(store), read_only=True) as con:
            spans = con.execute(_SPANS, [user_agent, _ns(mission_start), _ns(mission_end)]).fetchall()
    except Exception as exc:  # noqa: BLE001 - an unreadable store is a run without a shown drive, not a crash
        figures.problem = f"the telemetry store could not be read: {str(exc).splitlines()[0] if str(exc) else exc}"
        return figures
    spans_ns = [(_ns(a) - SLACK_NS, _ns(b) + SLACK_NS) for a, b in windows or []]
    drive: dict[str, tuple[int, int]] = {}
    own: dict[str, bool] = {}
    for trace_id, with_agent, first, last in spans:
        if key:
            ours = tagged(key, trace_id) and any(a <= first <= b for a, b in spans_ns)
        else:
            ours = with_agent
        if ours:
            a, b = drive.get(trace_id, (first, last))
            drive[trace_id] = (min(a, first), max(b, last))
        else:
            own[trace_id] = own.get(trace_id, False) or with_agent
    if not key:  # by User-Agent, a trace is the drive's when any of its spans is (the services' own calls carry theirs)
        own = {t: ua for t, ua in own.items() if t not in drive}
    figures.requests, figures.own_requests, figures.forged = len(drive), len(own), sum(own.values())
    if drive:
        figures.start = _when(min(a for a, _ in drive.values()))
        figures.end = _when(max(b for _, b in drive.values()))
    if figures.requests < MIN_REQUESTS:
        if key:
            how = (f"{figures.requests} trace(s) tagged by the harness's drive in the store (at least "
                   f"{MIN_REQUESTS} needed; the harness ran {figures.harness_drives or 0} drive(s) for the agent)")
            if figures.forged:
                how += f"; {figures.forged} trace(s) carried the scenario's User-Agent without the harness's tag"
            fix = "the drive counts only when the harness runs it (`obs drive`)"
        else:
            how = f"{figures.requests} request(s) tagged {user_agent}* in the store (at least {MIN_REQUESTS} needed)"
            fix = "scenario/drive.json, which the agent can write, is not evidence"
        figures.problem = f"the scenario never drove the stack inside the mission: {how}; {fix}"
    return figures


def run_drive(run_dir: Path) -> dict | None:
    """The drive(s) the harness ran for the agent ({"duration": s, "vus": n, "drives": k}), from
    the harness's own drive records in the run folder (written by the harness, not the agent)."""
    found = []
    for path in sorted(Path(run_dir).glob("harness-drive-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8")[:1_000_000])
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            dur = data.get("duration_s", data.get("duration"))
            vus = data.get("vus")
            if isinstance(dur, (int, float)) and isinstance(vus, int):
                found.append((float(dur), vus))
    if not found:
        return None
    return {"duration": found[-1][0], "vus": found[-1][1], "drives": len(found)}
