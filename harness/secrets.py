"""Keep secrets out of what a run leaves behind.

The agent needs the unit's key in its environment (opencode reads `{env:VOT_API_KEY}`),
so a model that runs `env` or echoes it puts the key into opencode's events, its SQLite
store, its logs or its report. After the run, every file of the run folder is scrubbed:
text files have each secret replaced by `[redacted]` (rewritten atomically), SQLite
databases get the same replacement in every text column, then a checkpoint and VACUUM
so no old page keeps a copy. Anything else still holding a secret is named, loudly.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from harness.atomic import write_atomic

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values ("none", "1") would redact ordinary text
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SKIP_SUFFIXES = ("-wal", "-shm", "-journal")


def secrets_from(values: Iterable[str | None]) -> list[str]:
    return sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)


def _scrub_sqlite(path: Path, secrets: list[str]) -> int:
    con = sqlite3.connect(path, timeout=30)
    changed = 0
    try:
        con.execute("PRAGMA secure_delete = ON")
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for secret in secrets:
                    cur = con.execute(
                        f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                        f'WHERE typeof("{column}") = \'text\' AND instr("{column}", ?) > 0',
                        (secret, REDACTED, secret))
                    changed += cur.rowcount
        con.commit()
        if changed:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return changed


def scrub_tree(root: Path, secrets: list[str]) -> tuple[int, list[str]]:
    """(files changed, files that still hold a secret afterwards)."""
    if not secrets or not Path(root).is_dir():
        return 0, []
    encoded = [s.encode() for s in secrets]
    changed = 0
    for path in sorted(Path(root).rglob("*")):
        if not path.is_file() or path.is_symlink() or path.name.endswith(_SKIP_SUFFIXES):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if data.startswith(_SQLITE_MAGIC):
            wal = path.with_name(path.name + "-wal")
            in_wal = wal.is_file() and any(s in wal.read_bytes() for s in encoded)
            if in_wal or any(s in data for s in encoded):
                try:
                    changed += bool(_scrub_sqlite(path, secrets)) or in_wal
                except sqlite3.Error:
                    pass  # reported below if it still holds one
            continue
        if not any(s in data for s in encoded):
            continue
        for s in encoded:
            data = data.replace(s, REDACTED.encode())
        mode = path.stat().st_mode
        write_atomic_bytes(path, data)
        os.chmod(path, mode & 0o7777)
        changed += 1
    left = [str(p) for p in sorted(Path(root).rglob("*"))
            if p.is_file() and not p.is_symlink() and _holds(p, encoded)]
    return changed, left


def _holds(path: Path, encoded: list[bytes]) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return any(s in data for s in encoded)


def write_atomic_bytes(path: Path, data: bytes) -> None:
    # Text files here are UTF-8 by construction; bytes that are not survive as-is.
    try:
        write_atomic(path, data.decode("utf-8"))
    except UnicodeDecodeError:
        tmp = path.with_name(f".{path.name}.scrub")
        tmp.write_bytes(data)
        os.replace(tmp, path)
