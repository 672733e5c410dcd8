"""The model calls of a run, read from opencode's own session store: one per assistant
message of the session tree (opencode makes one LLM call per assistant message), with its
times and the tokens the server reported for it (opencode stores the server's `usage`)."""

from __future__ import annotations

import json
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


def read_turns(conn: sqlite3.Connection, session_ids: list[str]) -> list[Turn]:
    marks = ",".join("?" * len(session_ids))
    rows = conn.execute(f"SELECT id, session_id, data FROM message WHERE session_id IN ({marks})",
                        session_ids).fetchall()
    parts: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(f"SELECT message_id, data FROM part WHERE session_id IN ({marks}) ORDER BY id",
                            session_ids).fetchall():
        try:
            parts.setdefault(row[0], []).append(json.loads(row[1]))
        except (TypeError, ValueError):
            continue
    turns = []
    for row in rows:
        try:
            data = json.loads(row[2])
        except (TypeError, ValueError):
            continue
        if data.get("role") != "assistant":
            continue
        times, tokens = data.get("time") or {}, data.get("tokens") or {}
        cache = tokens.get("cache") or {}
        created = times.get("created")
        if not isinstance(created, (int, float)):
            continue
        completed = times.get("completed")
        error = data.get("error")
        turns.append(Turn(
            message=row[0], session=row[1], created=created / 1000,
            completed=completed / 1000 if isinstance(completed, (int, float)) else None,
            prompt=_int(tokens.get("input")) + _int(cache.get("read")) + _int(cache.get("write")),
            cached=_int(cache.get("read")),
            output=_int(tokens.get("output")) + _int(tokens.get("reasoning")),
            reasoning=_int(tokens.get("reasoning")),
            finish=data.get("finish"), mode=data.get("mode"),
            summary=data.get("summary") in (True, 1, "true") or data.get("mode") == "compaction",
            error=(error.get("name") if isinstance(error, dict) else str(error)) if error else None,
            parts=parts.get(row[0], []),
        ))
    return sorted(turns, key=lambda t: (t.created, t.message))


def load_turns(data_dir: Path, root_session: str) -> list[Turn]:
    with store_copy(data_dir) as conn:
        return read_turns(conn, tree_ids(conn, root_session))
