"""An empty opencode store for tests: the tables and columns harness/opencode/store.py reads."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = ("CREATE TABLE session (id TEXT, parent_id TEXT, title TEXT, time_created INTEGER, version TEXT, "
          "tokens_input INTEGER, tokens_output INTEGER, tokens_reasoning INTEGER, tokens_cache_read INTEGER, "
          "tokens_cache_write INTEGER); CREATE TABLE message (id TEXT, session_id TEXT, data TEXT);"
          "CREATE TABLE part (id TEXT, message_id TEXT, session_id TEXT, data TEXT);")


def new_store(data_dir: Path) -> sqlite3.Connection:
    """`data_dir/opencode.db`, created with opencode's tables, open for the test to fill."""
    data_dir.mkdir(parents=True)
    conn = sqlite3.connect(data_dir / "opencode.db")
    conn.executescript(SCHEMA)
    return conn
