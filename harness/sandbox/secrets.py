"""Keep secrets out of what a run leaves behind.

The agent needs the unit's key in its environment (opencode reads `{env:VOT_API_KEY}`),
so a model that runs `env` or echoes it puts the key into opencode's events, its SQLite
store, its logs, its report, or (sent to a shop endpoint) the mission's DuckDB store.
After the run, each file is scrubbed by what it is:

- UTF-8 text: every form of each secret (as is, base64 at any alignment, URL-encoded)
  replaced by `[redacted]`, rewritten atomically;
- SQLite: the same replacement in every text column, then a checkpoint and VACUUM;
- DuckDB: the replacement through DuckDB in every VARCHAR/JSON column, then the live
  data copied into a fresh file (no old block keeps a copy) that replaces it;
- anything else is never rewritten (a byte-for-byte edit would corrupt it): a binary
  that still holds a secret is named on the record.
"""

from __future__ import annotations

import base64
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, quote_plus

from harness.atomic import write_atomic
from harness.paths import RUN_RECORD

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values ("none", "1") would redact ordinary text
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header's checksum
_SKIP_SUFFIXES = ("-wal", "-shm", "-journal", ".wal")


def secrets_from(values: Iterable[str | None]) -> list[str]:
    return sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)


def _base64_fragments(secret: bytes) -> set[bytes]:
    """The part of base64 text that encodes `secret` wherever it starts in the encoded data:
    for each of the 3 alignments, the characters that depend on the secret's bytes only."""
    found = set()
    for lead in range(3):
        total = lead + len(secret)
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            fragment = encode(b"\0" * lead + secret)[(0, 2, 3)[lead]:(total // 3) * 4]
            if len(fragment) >= MIN_SECRET_LEN:
                found.add(fragment)
    return found


def forms(secrets: list[str]) -> list[bytes]:
    """Every form looked for, longest first (a longer one may contain a shorter one)."""
    out: set[bytes] = set()
    for secret in secrets:
        raw = secret.encode()
        out |= {raw, quote(secret, safe="").encode(), quote_plus(secret, safe="").encode()}
        out |= _base64_fragments(raw)
    return sorted(out, key=len, reverse=True)


def _holds_any(data: bytes, encoded: list[bytes]) -> bool:
    return any(f in data for f in encoded)


# -- SQLite ------------------------------------------------------------------------------
def _scrub_sqlite(path: Path, encoded: list[bytes]) -> int:
    con = sqlite3.connect(path, timeout=30)
    changed = 0
    try:
        con.execute("PRAGMA secure_delete = ON")
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for form in encoded:
                    text = form.decode()
                    cur = con.execute(
                        f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                        f'WHERE typeof("{column}") = \'text\' AND instr("{column}", ?) > 0',
                        (text, REDACTED, text))
                    changed += cur.rowcount
        con.commit()
        if changed:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return changed


def _scrub_sqlite_file(path: Path, data: bytes, encoded: list[bytes]) -> bool:
    wal = path.with_name(path.name + "-wal")
    in_wal = wal.is_file() and _holds_any(wal.read_bytes(), encoded)
    if not (in_wal or _holds_any(data, encoded)):
        return False
    try:
        return bool(_scrub_sqlite(path, encoded)) or in_wal
    except sqlite3.Error:
        return False  # named afterwards if it still holds one


# -- DuckDB ------------------------------------------------------------------------------
def _duck_text_columns(con) -> list[tuple[str, str, str, str]]:
    return con.execute(
        "SELECT schema_name, table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database() AND NOT internal "
        "AND (data_type = 'VARCHAR' OR data_type = 'JSON')").fetchall()


def _duck_where(column: str, n: int) -> str:
    return " OR ".join([f'contains("{column}"::VARCHAR, ?)'] * n)


def _duckdb_holds(path: Path, encoded: list[bytes]) -> bool:
    import duckdb

    texts = [f.decode() for f in encoded]
    with duckdb.connect(str(path), read_only=True) as con:
        for schema, table, column, _ in _duck_text_columns(con):
            hit = con.execute(f'SELECT 1 FROM "{schema}"."{table}" WHERE {_duck_where(column, len(texts))} LIMIT 1',
                              texts).fetchone()
            if hit:
                return True
    return _holds_any(path.read_bytes(), encoded)


def _scrub_duckdb(path: Path, encoded: list[bytes]) -> bool:
    """Replace through DuckDB (its strings are compressed: a byte search can miss them), then
    copy the live data into a fresh file so no freed block keeps a copy."""
    import duckdb

    texts = [f.decode() for f in encoded]
    changed = 0
    with duckdb.connect(str(path)) as con:
        for schema, table, column, dtype in _duck_text_columns(con):
            value = f'"{column}"::VARCHAR'
            for text in texts:
                value = f"replace({value}, ?, '{REDACTED}')"
            params = [*texts, *texts]
            changed += con.execute(
                f'UPDATE "{schema}"."{table}" SET "{column}" = ({value})::{dtype} '
                f"WHERE {_duck_where(column, len(texts))}", params).fetchone()[0]
        if not changed:
            return False
        fresh = path.with_name(f".{path.name}.scrub")
        fresh.unlink(missing_ok=True)
        con.execute(f"ATTACH '{fresh}' AS fresh_copy")
        con.execute(f'COPY FROM DATABASE "{con.execute("SELECT current_database()").fetchone()[0]}" TO fresh_copy')
        con.execute("DETACH fresh_copy")
    mode = path.stat().st_mode
    os.replace(fresh, path)
    os.chmod(path, mode & 0o7777)
    for leftover in (path.with_name(path.name + ".wal"), fresh.with_name(fresh.name + ".wal")):
        leftover.unlink(missing_ok=True)
    return True


# -- the walk ----------------------------------------------------------------------------
def _kind(data: bytes) -> str:
    if data.startswith(_SQLITE_MAGIC):
        return "sqlite"
    if data[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    return "text"


def _scrub_one(path: Path, encoded: list[bytes]) -> tuple[bool, bool]:
    """(changed, still holds a secret)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False, False
    kind = _kind(data)
    if kind == "sqlite":
        changed = _scrub_sqlite_file(path, data, encoded)
        return changed, _holds_any(path.read_bytes(), encoded)
    if kind == "duckdb":
        try:
            changed = _scrub_duckdb(path, encoded)
            return changed, _duckdb_holds(path, encoded)
        except Exception:  # noqa: BLE001 - duckdb's errors have no common base: a store we cannot open is named
            return False, True
    if not _holds_any(data, encoded):
        return False, False
    if kind == "binary":
        return False, True  # never rewritten: a byte-for-byte edit would corrupt what we cannot parse
    text = data.decode("utf-8")
    for form in encoded:
        text = text.replace(form.decode(), REDACTED)
    mode = path.stat().st_mode
    write_atomic(path, text)
    os.chmod(path, mode & 0o7777)
    return True, _holds_any(path.read_bytes(), encoded)


def scrub_files(paths: Iterable[Path], secrets: list[str]) -> tuple[int, list[str]]:
    """(files changed, files that still hold a secret afterwards), in the order given.
    Links and the side files of a database (its WAL, journal) are skipped."""
    if not secrets:
        return 0, []
    encoded = forms(secrets)
    changed, left = 0, []
    for path in paths:
        if path.is_symlink() or not path.is_file() or path.name.endswith(_SKIP_SUFFIXES):
            continue
        did, holds = _scrub_one(path, encoded)
        changed += did
        if holds:
            left.append(str(path))
    return changed, left


def scrub_tree(root: Path, secrets: list[str], last: tuple[str, ...] = (RUN_RECORD,)) -> tuple[int, list[str]]:
    """Every file under `root`, those named in `last` (at the top) scrubbed after the rest."""
    if not secrets or not Path(root).is_dir():
        return 0, []
    root = Path(root)
    tail = [root / name for name in last]
    paths = [p for p in sorted(root.rglob("*")) if p not in tail] + tail
    return scrub_files(paths, secrets)
