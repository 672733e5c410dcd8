"""The model calls of a run, read from opencode's own session store: one per assistant
message of the session tree (opencode makes one LLM call per assistant message), with its
times and the tokens the server reported for it (opencode stores the server's `usage`)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.opencode.store import store_copy, tree_ids


@dataclass
class Turn:
    message: str
    session: str
    created: float  # epoch seconds
    completed: float | None
    prompt: int  # input + cache read + cache write: the prompt the server saw
    cached: int  # cache read: the server's cached (prefix-hit) tokens
    output: int  # output + reasoning: completion tokens
    reasoning: int
    finish: str | None
    mode: str | None
    summary: bool  # a compaction (opencode's summary agent)
    error: str | None
    parts: list[dict[str, Any]] = field(default_factory=list)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


# What a turn keeps of its parts: the fields tool-call health reads, each bounded. opencode's
# store sits in the agent's HOME: a 120 MB store once made the launcher parse every part whole
# (2,950 MiB at its peak, x24 a byte). SQLite extracts these fields row by row; Python never
# holds a whole part, nor the whole table (issue 60).
TEXT_CAP = 64 * 1024  # characters of a text part read (a leaked tool call shows in its first lines)
FIELD_CAP = 200  # characters of a status, a tool name or an error kept
_PARTS = f"""SELECT message_id, json_extract(data, '$.type') AS type,
                    CASE WHEN json_extract(data, '$.type') = 'text'
                         THEN substr(json_extract(data, '$.text'), 1, {TEXT_CAP}) END AS text,
                    substr(json_extract(data, '$.tool'), 1, {FIELD_CAP}) AS tool,
                    substr(json_extract(data, '$.state.status'), 1, {FIELD_CAP}) AS status,
                    substr(json_extract(data, '$.state.input.error'), 1, {FIELD_CAP}) AS input_error,
                    substr(json_extract(data, '$.state.error'), 1, {FIELD_CAP}) AS error
             FROM part WHERE session_id IN ({{marks}}) ORDER BY id"""
_MESSAGES = f"""SELECT id, session_id, json_extract(data, '$.role') AS role,
                       json_extract(data, '$.time.created') AS created,
                       json_extract(data, '$.time.completed') AS completed,
                       json_extract(data, '$.tokens.input') AS input, json_extract(data, '$.tokens.output') AS output,
                       json_extract(data, '$.tokens.reasoning') AS reasoning,
                       json_extract(data, '$.tokens.cache.read') AS cache_read,
                       json_extract(data, '$.tokens.cache.write') AS cache_write,
                       substr(json_extract(data, '$.finish'), 1, {FIELD_CAP}) AS finish,
                       substr(json_extract(data, '$.mode'), 1, {FIELD_CAP}) AS mode,
                       json_extract(data, '$.summary') AS summary,
                       substr(coalesce(json_extract(data, '$.error.name'), json_extract(data, '$.error')), 1,
                              {FIELD_CAP}) AS error
                FROM message WHERE session_id IN ({{marks}})"""


def read_turns(conn: sqlite3.Connection, session_ids: list[str]) -> list[Turn]:
    marks = ",".join("?" * len(session_ids))
    valid = "AND json_valid(data)"
    parts: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(_PARTS.format(marks=marks).replace("ORDER BY id", f"{valid} ORDER BY id"), session_ids):
        state: dict[str, Any] = {"status": row[4], "error": row[6]}
        if row[5] is not None:
            state["input"] = {"error": row[5]}
        parts.setdefault(row[0], []).append({"type": row[1], "text": row[2], "tool": row[3], "state": state})
    turns = []
    for row in conn.execute(_MESSAGES.format(marks=marks) + f" {valid}", session_ids):
        (message, session, role, created, completed, t_in, t_out, t_reason, c_read, c_write, finish, mode,
         summary, error) = tuple(row)
        if role != "assistant" or not isinstance(created, (int, float)):
            continue
        turns.append(Turn(
            message=message, session=session, created=created / 1000,
            completed=completed / 1000 if isinstance(completed, (int, float)) else None,
            prompt=_int(t_in) + _int(c_read) + _int(c_write),
            cached=_int(c_read),
            output=_int(t_out) + _int(t_reason),
            reasoning=_int(t_reason),
            finish=finish, mode=mode,
            summary=summary in (True, 1, "true") or mode == "compaction",
            error=str(error) if error else None,
            parts=parts.get(message, []),
        ))
    return sorted(turns, key=lambda t: (t.created, t.message))


def load_turns(data_dir: Path, root_session: str) -> list[Turn]:
    with store_copy(data_dir) as conn:
        return read_turns(conn, tree_ids(conn, root_session))
