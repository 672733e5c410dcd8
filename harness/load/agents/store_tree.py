"""The session tree of a run from opencode's own store: which session each wire exchange was.

The wire log (what crossed the bridge) holds the timings and sizes; opencode's store
(harness/opencode/store.py, a private copy, schema checked) says which session each assistant
message belonged to and each session's parent. An exchange is the assistant message whose
[created, completed] span holds its start (opencode creates the message, then sends the
request); of several, the latest created. An exchange no message holds (opencode's title
request, say) keeps a session of its own, named `x<n>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.opencode.store import DB_NAME, check_schema, store_copy

SLACK_S = 0.5  # the store's and the wire's clocks are the same host's; this covers ms rounding and write order


@dataclass
class StoreTree:
    parents: dict[str, str | None]  # session -> parent session
    spans: list[tuple[float, float, str]]  # assistant messages: (created s, completed s, session)

    def session_of(self, start: float) -> str | None:
        best = None
        for created, completed, sid in self.spans:
            if created - SLACK_S <= start <= completed + SLACK_S and (best is None or created > best[0]):
                best = (created, sid)
        return best[1] if best else None


def read(data_dir: Path) -> StoreTree:
    with store_copy(data_dir) as conn:
        check_schema(conn, data_dir / DB_NAME)
        parents = {r["id"]: r["parent_id"] for r in conn.execute("SELECT id, parent_id FROM session")}
        spans = [(r["created"] / 1000, (r["completed"] or r["created"]) / 1000, r["session_id"]) for r in conn.execute(
            """SELECT session_id, json_extract(data, '$.time.created') AS created,
                      json_extract(data, '$.time.completed') AS completed
               FROM message WHERE json_extract(data, '$.role') = 'assistant'
                 AND json_extract(data, '$.time.created') IS NOT NULL""")]
    return StoreTree(parents=parents, spans=spans)


def run_store(run_dir: Path) -> Path | None:
    """Where a run folder keeps opencode's data directory (harness/opencode's XDG layout), if it does."""
    path = run_dir / "opencode" / "xdg" / "data" / "opencode"
    return path if (path / DB_NAME).is_file() else None
