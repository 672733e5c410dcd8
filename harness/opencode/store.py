"""Read a run's figures from opencode's own SQLite session store (opencode.db).

The store is in WAL mode: copy the db with its -wal and -shm files and query the
copy, or committed frames can be missed. Figures are summed over the whole session
tree (subagents carry much of the spend: sessions under the root by parent_id) and nothing else:
another root in the store (an opencode the agent ran) is only counted as foreign: Input = input + cache read + cache write,
Output = output + reasoning, Cache = cache read + cache write; turns = assistant
messages; median turn = median of completed − created; compactions = summary
messages (opencode's compaction agent).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path


from harness.errors import UserError
from harness.records.record import SessionFigures, Tokens

DB_NAME = "opencode.db"
# The tables and columns collect reads (opencode-ai 1.18.x, the pinned version). opencode 2.x
# moved sessions to new tables (session_v2, session_message): refused by name, never misread.
SCHEMA = {
    "session": {"id", "parent_id", "title", "time_created", "version", "tokens_input", "tokens_output",
                "tokens_reasoning", "tokens_cache_read", "tokens_cache_write"},
    "message": {"id", "session_id", "data"},
    "part": {"id", "message_id", "session_id", "data"},
}


def check_schema(conn: sqlite3.Connection, db: Path) -> None:
    """Refuse a store whose layout is not the one this harness reads."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    problems = []
    for table, columns in SCHEMA.items():
        if table not in tables:
            problems.append(f"no table {table}")
            continue
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if missing := sorted(columns - have):
            problems.append(f"table {table} lacks {', '.join(missing)}")
    if problems:
        newer = sorted(t for t in tables if t.endswith("_v2"))
        raise UserError(
            f"unknown opencode store schema: {'; '.join(problems)}"
            + (f" (it has {', '.join(newer)}: opencode 2.x's layout)" if newer else ""),
            file=db, fix="run the opencode version this harness pins (package.json: opencode-ai 1.18.x; "
                         "`npm ci` installs it), or teach harness/opencode/store.py the new layout")


VALUE_CAP = 64 << 20  # bytes of one value a query of the store may make
READ_S = 60.0  # the store's reading, all queries together: past it sqlite3 interrupts them
STORE_CAP = 1 << 30  # bytes per file copied: the agent's one-file cap (RLIMIT_FSIZE), far below a filled TMPDIR
_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _copy_regular(dir_fd: int, name: str, dest: Path) -> bool:
    """`name` in the open folder copied to `dest` only if it is a regular file (a link the agent
    left, to /dev/zero say, or a FIFO is never opened as one), at most STORE_CAP bytes."""
    try:
        fd = os.open(name, _NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UserError(f"{name} in opencode's store folder is not a file the harness reads ({exc.strerror})",
                        file=dest.name, fix="the agent replaced opencode's store: no figures from it") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > STORE_CAP:
            raise UserError(f"{name} in opencode's store folder is not a regular file under {STORE_CAP:,} bytes",
                            file=dest.name, fix="the agent replaced opencode's store: no figures from it")
        if info.st_blocks * 512 + (1 << 16) < info.st_size:  # SQLite never leaves holes; a copy would fill them
            raise UserError(f"{name} in opencode's store folder is sparse ({info.st_size:,} bytes, "
                            f"{info.st_blocks * 512:,} on disk)", file=dest.name,
                            fix="the agent replaced opencode's store: no figures from it")
        with open(dest, "wb") as out:
            copied = 0
            while block := os.read(fd, 1 << 20):
                copied += len(block)
                if copied > STORE_CAP:
                    raise UserError(f"{name} grew past {STORE_CAP:,} bytes while copied", file=dest.name,
                                    fix="the agent replaced opencode's store: no figures from it")
                out.write(block)
    finally:
        os.close(fd)
    return True


@contextmanager
def store_copy(data_dir: Path) -> Iterator[sqlite3.Connection]:
    """A private copy of the store (db, WAL, shm) opened read-write there: links never followed."""
    db = data_dir / DB_NAME
    try:
        dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        dir_fd = None
    if dir_fd is None or not stat.S_ISREG(os.stat(DB_NAME, dir_fd=dir_fd, follow_symlinks=False).st_mode
                                          if os.path.lexists(db) else 0):
        if dir_fd is not None:
            os.close(dir_fd)
        raise UserError(f"no opencode session store at {db}", file=data_dir,
                        fix="pass opencode's data directory ($XDG_DATA_HOME/opencode), the one holding opencode.db")
    try:
        with tempfile.TemporaryDirectory(prefix="llms-benchmark-store-") as tmp:
            for suffix in ("", "-wal", "-shm"):
                _copy_regular(dir_fd, f"{DB_NAME}{suffix}", Path(tmp) / f"{DB_NAME}{suffix}")
            conn = sqlite3.connect(Path(tmp) / DB_NAME)
            conn.execute("PRAGMA trusted_schema = OFF")
            # The agent could rewrite this file: a generated column or a huge value is bounded in
            # length, and every query in time (the progress handler aborts it past the deadline).
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_CAP)
            deadline = time.monotonic() + READ_S
            conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
            conn.row_factory = sqlite3.Row
            try:
                yield conn
            finally:
                conn.close()
    finally:
        os.close(dir_fd)


def _root_session(conn: sqlite3.Connection, session_id: str | None, title: str | None,
                  since_ms: int | None, data_dir: Path) -> sqlite3.Row:
    where, params = ["parent_id IS NULL"], []
    if session_id:
        where.append("id = ?")
        params.append(session_id)
    if title:
        where.append("title = ?")
        params.append(title)
    if since_ms is not None:
        where.append("time_created >= ?")
        params.append(since_ms)
    rows = conn.execute(f"SELECT * FROM session WHERE {' AND '.join(where)} ORDER BY time_created",
                        params).fetchall()
    if len(rows) != 1:
        which = f"session {session_id}" if session_id else f"title {title!r}" if title else "any root session"
        listing = ", ".join(f"{r['id']} ({r['title']!r})" for r in rows[:5])
        raise UserError(
            f"{len(rows)} root sessions match {which} in {data_dir / DB_NAME}" + (f": {listing}" if rows else ""),
            file=data_dir / DB_NAME,
            fix="name exactly one root session with --session ID or --title TITLE",
        )
    return rows[0]


def tree_ids(conn: sqlite3.Connection, root_id: str) -> list[str]:
    """The ids of a session and of every session under it (its sub-agents)."""
    rows = conn.execute(
        """WITH RECURSIVE tree(id) AS (
               SELECT id FROM session WHERE id = ?
               UNION SELECT s.id FROM session s JOIN tree t ON s.parent_id = t.id)
           SELECT id FROM tree""",
        (root_id,),
    ).fetchall()
    return [r["id"] for r in rows]


def session_tree(data_dir: Path, root_id: str) -> list[str]:
    with store_copy(data_dir) as conn:
        return tree_ids(conn, root_id)


def _ms_to_dt(ms: float | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def collect(data_dir: Path, *, session_id: str | None = None, title: str | None = None,
            since: datetime | None = None) -> SessionFigures:
    since_ms = int(since.timestamp() * 1000) if since else None
    try:
        return _collect(data_dir, session_id, title, since_ms)
    except sqlite3.Error as exc:  # a store the agent altered: interrupted past READ_S, a value past VALUE_CAP
        raise UserError(f"opencode's store could not be read ({exc})", file=data_dir / DB_NAME,
                        fix="the agent altered opencode's store: no figures from it") from None


def _collect(data_dir: Path, session_id: str | None, title: str | None, since_ms: int | None) -> SessionFigures:
    with store_copy(data_dir) as conn:
        check_schema(conn, data_dir / DB_NAME)
        root = _root_session(conn, session_id, title, since_ms, data_dir)
        ids = tree_ids(conn, root["id"])
        marks = ",".join("?" * len(ids))
        foreign = conn.execute(f"SELECT COUNT(*) FROM session WHERE id NOT IN ({marks})", ids).fetchone()[0]
        sums = conn.execute(
            f"""SELECT SUM(tokens_input) AS input, SUM(tokens_output) AS output,
                       SUM(tokens_reasoning) AS reasoning, SUM(tokens_cache_read) AS cache_read,
                       SUM(tokens_cache_write) AS cache_write
                FROM session WHERE id IN ({marks})""",
            ids,
        ).fetchone()
        messages = conn.execute(
            f"""SELECT json_extract(data, '$.time.created') AS created,
                       json_extract(data, '$.time.completed') AS completed,
                       json_extract(data, '$.summary') AS summary,
                       json_extract(data, '$.mode') AS mode
                FROM message WHERE session_id IN ({marks})
                  AND json_extract(data, '$.role') = 'assistant'""",
            ids,
        ).fetchall()
    cache_read, cache_write = sums["cache_read"] or 0, sums["cache_write"] or 0
    reasoning = sums["reasoning"] or 0
    tokens = Tokens(
        input=(sums["input"] or 0) + cache_read + cache_write,
        output=(sums["output"] or 0) + reasoning,
        cache=cache_read + cache_write,
        reasoning=reasoning,
    )
    durations = [(m["completed"] - m["created"]) / 1000 for m in messages if m["created"] and m["completed"]]
    compactions = sum(1 for m in messages if m["summary"] in (1, True, "true") or m["mode"] == "compaction")
    ended = max((m["completed"] for m in messages if m["completed"]), default=None)
    return SessionFigures(
        root_session=root["id"],
        sessions=len(ids),
        tokens=tokens,
        turns=len(messages),
        median_turn_s=round(float(statistics.median(durations)), 3) if durations else None,
        compactions=compactions,
        opencode_version=root["version"] if "version" in root.keys() else None,
        started=_ms_to_dt(root["time_created"]),
        ended=_ms_to_dt(ended),
        cache_read=cache_read,
        foreign_sessions=foreign,
    )
