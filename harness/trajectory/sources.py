"""The agent's turns as a run folder records them, for its trajectory.

Two sources, the richer first:

- opencode's store (`opencode/xdg/data/opencode/opencode.db`): every session of the run, the
  subagents' included, each message (the user's prompt, each assistant turn) with its parts
  (text, reasoning, tool calls with their input and output, the task tool's child session).
  Read through harness/opencode/store.py's private copy (schema checked, links never followed,
  values and time bounded);
- opencode's JSON events (`opencode-events.jsonl`): the root session's turns only, no prompt.

Both were written beside the agent (it runs as the same user in the same folders): every text
kept is bounded (TEXT_CAP, ARG_CAP), a part or event line past PART_CAP is named, not parsed,
and at most MAX_PARTS parts are read.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError
from harness.opencode.store import DB_NAME, check_schema, store_copy

TEXT_CAP = 64 << 10  # characters of one message, reasoning or tool output kept
ARG_CAP = 16 << 10  # characters of one tool argument (a string, or the whole value as JSON)
PART_CAP = 4 << 20  # bytes of one store row or event line parsed: past it, named only
EVENTS_CAP = 256 << 20  # bytes of opencode's events read
MAX_PARTS = 200_000  # parts (or event lines) read
MAX_SESSIONS = 1_000  # sessions read from the store
TOTAL_CAP = 32 << 20  # characters of text kept over the whole run: past it each text keeps SMALL_CAP
SMALL_CAP = 256


def bounded(text: object, cap: int = TEXT_CAP) -> str:
    """`text` as a string of at most `cap` characters, saying how much was cut."""
    text = text if isinstance(text, str) else "" if text is None else str(text)
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n[truncated: {len(text) - cap:,} more characters]"


def bounded_args(value: object) -> dict:
    """A tool call's arguments as ATIF wants them (an object), every string in it bounded and
    the whole at most ARG_CAP characters of JSON (past it, the JSON text, cut)."""
    if not isinstance(value, dict):
        return {} if value is None else {"value": bounded(json.dumps(value, default=str), ARG_CAP)}

    def cut(v, depth=0):
        if isinstance(v, str):
            return bounded(v, ARG_CAP)
        if depth > 20:
            return "[nested too deep]"
        if isinstance(v, dict):
            return {bounded(str(k), 256): cut(x, depth + 1) for k, x in list(v.items())[:1000]}
        if isinstance(v, list):
            return [cut(x, depth + 1) for x in v[:1000]]
        return v if isinstance(v, (int, float, bool)) or v is None else str(v)

    out = cut(value)
    text = json.dumps(out, default=str)
    return out if len(text) <= 4 * ARG_CAP else {"truncated_json": bounded(text, ARG_CAP)}


class Budget:
    """The characters of text a trajectory may still keep (TOTAL_CAP over the whole run)."""

    def __init__(self, total: int = TOTAL_CAP) -> None:
        self.left = total

    def take(self, text: object, cap: int = TEXT_CAP) -> str:
        kept = bounded(text, min(cap, max(self.left, SMALL_CAP)))
        self.left -= len(kept)
        return kept

    def arguments(self, value: object) -> dict:
        args = bounded_args(value)
        text = json.dumps(args, default=str)
        if len(text) > max(self.left, SMALL_CAP):
            args = {"truncated_json": bounded(text, SMALL_CAP)}
        self.left -= len(json.dumps(args, default=str))
        return args


@dataclass
class ToolUse:
    call_id: str
    name: str
    arguments: dict
    output: str | None
    status: str | None
    started_ms: float | None = None
    ended_ms: float | None = None
    child: str | None = None  # the subagent session a task call opened


@dataclass
class Entry:
    """One message: the user's (a prompt) or the assistant's (one model turn)."""

    role: str  # "user" | "assistant"
    id: str
    created_ms: float | None
    completed_ms: float | None = None
    text: str = ""
    reasoning: str = ""
    tools: list[ToolUse] = field(default_factory=list)
    model: str | None = None
    tokens: dict | None = None  # opencode's own count (input, output, reasoning, cache.read/write)
    finish: str | None = None


@dataclass
class AgentSession:
    id: str
    parent: str | None
    created_ms: float | None
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Sessions:
    root: str
    sessions: dict[str, AgentSession]
    source: str  # which file they came from, relative to the run folder
    skipped: int = 0  # parts or lines past PART_CAP or MAX_PARTS, named in the trajectory's notes


def _json(raw) -> dict | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _joined(before: str, text: str) -> str:
    return bounded(before + ("\n" if before else "") + text)


def _apply_part(entry: Entry, part: dict, budget: Budget) -> None:
    """One part of a message (store part or event part) into its entry."""
    kind = part.get("type")
    if kind == "text" and not part.get("synthetic"):
        entry.text = _joined(entry.text, budget.take(part.get("text")))
    elif kind == "reasoning":
        entry.reasoning = _joined(entry.reasoning, budget.take(part.get("text")))
    elif kind == "tool":
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        times = state.get("time") if isinstance(state.get("time"), dict) else {}
        meta = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
        status = state.get("status") if isinstance(state.get("status"), str) else None
        output = state.get("output") if status == "completed" else state.get("error")
        child = meta.get("sessionId") or meta.get("sessionID")
        entry.tools.append(ToolUse(
            call_id=bounded(part.get("callID") or part.get("id") or f"call-{len(entry.tools)}", 256),
            name=bounded(part.get("tool") or "unknown", 256), arguments=budget.arguments(state.get("input")),
            output=None if output is None else budget.take(output), status=bounded(status, 64) if status else None,
            started_ms=_num(times.get("start")), ended_ms=_num(times.get("end")),
            child=child if isinstance(child, str) and len(child) <= 256 else None))
    elif kind == "step-finish":
        if isinstance(part.get("tokens"), dict):
            entry.tokens = part["tokens"]
        entry.finish = bounded(part.get("reason"), 64) if part.get("reason") else entry.finish


# -- the store --------------------------------------------------------------------------------
def from_store(data_dir: Path, root: str | None) -> Sessions:
    try:
        with store_copy(data_dir) as conn:
            check_schema(conn, data_dir / DB_NAME)
            return _read_store(conn, root)
    except sqlite3.Error as exc:
        raise UserError(f"opencode's store could not be read ({exc})", file=DB_NAME,
                        fix="the agent altered opencode's store: the trajectory is built from its events") from None


def _read_store(conn: sqlite3.Connection, root: str | None) -> Sessions:
    rows = conn.execute("SELECT id, parent_id, time_created FROM session ORDER BY time_created LIMIT ?",
                        (MAX_SESSIONS,)).fetchall()
    sessions = {str(r["id"]): AgentSession(str(r["id"]), r["parent_id"], _num(r["time_created"])) for r in rows}
    roots = [s for s in sessions.values() if s.parent is None]
    if root not in sessions:
        if not roots:
            raise UserError("opencode's store holds no root session", file=DB_NAME,
                            fix="the run's agent never started a session: no trajectory")
        root = roots[0].id
    entries: dict[str, Entry] = {}
    skipped = 0
    for r in conn.execute("SELECT id, session_id, CASE WHEN length(data) <= ? THEN data END AS data FROM message "
                          "LIMIT ?", (PART_CAP, MAX_PARTS)):
        data, session = _json(r["data"]), sessions.get(str(r["session_id"]))
        if data is None or session is None:
            skipped += 1
            continue
        times = data.get("time") if isinstance(data.get("time"), dict) else {}
        role = "user" if data.get("role") == "user" else "assistant"
        tokens = data.get("tokens") if isinstance(data.get("tokens"), dict) else None
        entry = Entry(role=role, id=str(r["id"]), created_ms=_num(times.get("created")),
                      completed_ms=_num(times.get("completed")), tokens=tokens,
                      model=bounded(data.get("modelID"), 256) if data.get("modelID") else None,
                      finish=bounded(data.get("finish"), 64) if data.get("finish") else None)
        entries[entry.id] = entry
        session.entries.append(entry)
    budget = Budget()
    for r in conn.execute("SELECT message_id, CASE WHEN length(data) <= ? THEN data END AS data FROM part "
                          "ORDER BY id LIMIT ?", (PART_CAP, MAX_PARTS)):
        entry, part = entries.get(str(r["message_id"])), _json(r["data"])
        if entry is None or part is None:
            skipped += 1
            continue
        _apply_part(entry, part, budget)
    for session in sessions.values():
        session.entries.sort(key=lambda e: (e.created_ms or 0, e.id))
    return Sessions(root=root, sessions=sessions, source=f"opencode/xdg/data/opencode/{DB_NAME}", skipped=skipped)


# -- the events -------------------------------------------------------------------------------
_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def from_events(path: Path, source: str) -> Sessions:
    """The root session's turns from opencode's `--format json` events (one JSON object a line)."""
    try:
        fd = os.open(path, _NOFOLLOW)
    except OSError as exc:
        raise UserError(f"opencode's events cannot be read ({exc.strerror})", file=source,
                        fix="a run folder whose mission ran keeps opencode-events.jsonl") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise UserError("opencode's events are not a regular file", file=source, fix="the agent replaced it")
        entries: dict[str, Entry] = {}
        session_id, skipped, read, budget = None, 0, 0, Budget()
        for _ in range(MAX_PARTS):
            line = fh.readline(PART_CAP + 1)
            read += len(line)
            if not line or read > EVENTS_CAP:
                break
            if len(line) > PART_CAP:  # the rest of an over-long line is skipped, unparsed
                skipped += 1
                while line and not line.endswith(b"\n") and read <= EVENTS_CAP:
                    line = fh.readline(PART_CAP)
                    read += len(line)
                continue
            event = _json(line)
            part = event.get("part") if event and isinstance(event.get("part"), dict) else None
            message = part.get("messageID") if part else None
            if not isinstance(message, str):
                skipped += bool(line.strip())
                continue
            session_id = session_id or event.get("sessionID")
            stamp = _num(event.get("timestamp"))
            entry = entries.setdefault(message, Entry(role="assistant", id=bounded(message, 256), created_ms=stamp))
            if event.get("type") == "step_finish":
                entry.completed_ms = stamp
            _apply_part(entry, part, budget)
    if not entries:
        raise UserError("opencode's events hold no model turn", file=source,
                        fix="the agent made no model call: no trajectory")
    root = bounded(session_id if isinstance(session_id, str) else "root", 256)
    ordered = sorted(entries.values(), key=lambda e: (e.created_ms or 0, e.id))
    session = AgentSession(root, None, ordered[0].created_ms, ordered)
    return Sessions(root=root, sessions={root: session}, source=source, skipped=skipped)


def read(run_dir: Path, root: str | None, events: str | None) -> Sessions | None:
    """The run's sessions from its store, else its events; None when it keeps neither. A store
    the agent altered falls back to the events (the store's error is then in `skipped`'s note)."""
    store = run_dir / "opencode" / "xdg" / "data" / "opencode"
    if os.path.lexists(store / DB_NAME):
        try:
            return from_store(store, root)
        except UserError:
            pass  # an unreadable store: the events say what they can
    if events and (Path(events).is_absolute() or ".." in Path(events).parts):
        events = Path(events).name  # an older record's absolute name: this folder's file, never another's
    if events and os.path.lexists(run_dir / events):
        return from_events(run_dir / events, events)
    return None
