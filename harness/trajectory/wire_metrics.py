"""Each model call on the harness's wire log (harness/sandbox/wirelog.py), given to the opencode
message it belongs to, and a step's metrics from it (or, where the wire saw none of a turn, from
opencode's own count).

An exchange belongs to the assistant message whose span overlaps it most; of equals, the latest
created (a subagent's call lies inside its parent's task message too). From opencode's events
(one session, no message times of their own) the exchanges go to the turns in order when both
counts agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import atif

from harness.records.record import RunRecord
from harness.sandbox import wirelog
from harness.trajectory.sources import Sessions

SLACK_S = 0.5  # the store's and the wire's clocks are the same host's: ms rounding and write order


def iso_ms(ms: float | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z") if ms else None


def _seconds(value) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        return None


def chat_rows(run_dir: Path, record: RunRecord) -> list[dict] | None:
    name = record.artifacts.wire_log or "wire.jsonl"
    path = run_dir / name
    if Path(name).is_absolute() or not path.is_file() or path.is_symlink():
        return None
    rows = [e for e in wirelog.read_log(path) if e.get("origin") != wirelog.TOOL_ORIGIN
            and str(e.get("path", "")).split("?")[0].endswith(wirelog.CHAT_PATH) and e.get("status") == 200]
    for e in rows:
        e["_start"], e["_end"] = _seconds(e.get("started")), _seconds(e.get("ended"))
    return sorted(rows, key=lambda e: e["_start"] or 0)


def assign(rows: list[dict], found: Sessions) -> tuple[dict[str, list[dict]], int]:
    """(assistant message id -> its exchanges, exchanges no message holds)."""
    turns = [e for s in found.sessions.values() for e in s.entries if e.role == "assistant"]
    out: dict[str, list[dict]] = {}
    if found.source.endswith(".jsonl") and len(turns) == len(rows):  # the events: one session, in order
        for entry, row in zip(sorted(turns, key=lambda e: e.created_ms or 0), rows):
            out.setdefault(entry.id, []).append(row)
        return out, 0
    unmatched = 0
    for row in rows:
        best = None
        for entry in turns:
            if row["_start"] is None or entry.created_ms is None:
                continue
            lo, hi = entry.created_ms / 1000 - SLACK_S, (entry.completed_ms or entry.created_ms) / 1000 + SLACK_S
            overlap = min(row["_end"] or row["_start"], hi) - max(row["_start"], lo)
            if overlap >= 0 and (best is None or (overlap, entry.created_ms) > best[0]):
                best = ((overlap, entry.created_ms), entry.id)
        if best is None:
            unmatched += 1
        else:
            out.setdefault(best[1], []).append(row)
    return out, unmatched


def wire_metrics(rows: list[dict]) -> atif.Metrics:
    usage = [r.get("usage") or {} for r in rows]
    first = rows[0]
    ttft = (_seconds(first.get("first_data")) or 0) - (first["_start"] or 0) if first.get("first_data") else None
    return atif.Metrics(
        prompt_tokens=sum(u.get("prompt_tokens", 0) for u in usage),
        completion_tokens=sum(u.get("completion_tokens", 0) for u in usage),
        cached_tokens=sum(u.get("cached_tokens", 0) for u in usage),
        extra={"source": "wire.jsonl", "reasoning_tokens": sum(u.get("reasoning_tokens", 0) for u in usage),
               "started": first.get("started"), "first_data": first.get("first_data"), "ended": rows[-1].get("ended"),
               "ttft_s": round(ttft, 6) if ttft is not None and ttft >= 0 else None,
               "duration_s": round(sum(r.get("seconds") or 0 for r in rows), 6),
               "finish_reason": rows[-1].get("finish_reason"), "requests": len(rows)})


def store_metrics(tokens: dict) -> atif.Metrics:
    """opencode's own count, where the wire saw none of this turn (no wire log, a cut exchange)."""
    def n(v) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0

    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    return atif.Metrics(
        prompt_tokens=n(tokens.get("input")) + n(cache.get("read")) + n(cache.get("write")),
        completion_tokens=n(tokens.get("output")) + n(tokens.get("reasoning")), cached_tokens=n(cache.get("read")),
        extra={"source": "opencode store", "reasoning_tokens": n(tokens.get("reasoning")),
               "cache_write_tokens": n(cache.get("write"))})
