"""Keep secrets out of what a run leaves behind.

The agent needs the unit's key in its environment (opencode reads `{env:VOT_API_KEY}`),
so a model that runs `env` or echoes it puts the key into opencode's events, its SQLite
store, its logs, its report, or (sent to a shop endpoint) the mission's DuckDB store.
After the run, each file is scrubbed by what it is:

- UTF-8 text: every form of each secret (as is, reversed, hex in either case, base64 and
  base32 at every alignment, URL-encoded) replaced by `[redacted]`, streamed through a
  temporary file (memory stays bounded by one chunk, whatever the agent wrote) that
  replaces the original atomically;
- SQLite: the same replacement in every text column, then a checkpoint and VACUUM;
- DuckDB: the replacement through DuckDB in every VARCHAR/JSON column, then the live
  data copied into a fresh file (no old block keeps a copy) that replaces it;
- anything else is never rewritten (a byte-for-byte edit would corrupt it): a binary
  that still holds a secret is named on the record.
"""

from __future__ import annotations

import base64
import codecs
import itertools
import os
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, quote_plus

from harness.paths import RUN_RECORD

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values ("none", "1") would redact ordinary text
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header's checksum
_SKIP_SUFFIXES = ("-wal", "-shm", "-journal", ".wal")


def secrets_from(values: Iterable[str | None]) -> list[str]:
    return sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)


def _fragments(secret: bytes, encode, group: int, bits: int) -> set[bytes]:
    """The characters of `encode`d text that depend on the secret's bytes only, wherever the
    secret starts in the encoded data: one fragment per alignment within a `group` of bytes
    (a character carries `bits` bits)."""
    found = set()
    for lead in range(group):
        encoded = encode(b"\0" * lead + secret)
        start, end = -(-8 * lead // bits), 8 * (lead + len(secret)) // bits
        fragment = encoded[start:end]
        if len(fragment) >= MIN_SECRET_LEN:
            found.add(fragment)
    return found


def forms(secrets: list[str]) -> list[bytes]:
    """Every form looked for, longest first (a longer one may contain a shorter one)."""
    out: set[bytes] = set()
    for secret in secrets:
        raw = secret.encode()
        out |= {raw, raw[::-1], raw.hex().encode(), raw.hex().upper().encode(),
                quote(secret, safe="").encode(), quote_plus(secret, safe="").encode()}
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            out |= _fragments(raw, encode, 3, 6)
        b32 = _fragments(raw, base64.b32encode, 5, 5)
        out |= b32 | {f.lower() for f in b32}
    return sorted(out, key=len, reverse=True)


# -- streaming ---------------------------------------------------------------------------
CHUNK = 1 << 20  # bytes read at a time: the scrub's memory is a few of these, whatever the file's size


def _pattern(encoded: list[bytes]) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(f) for f in encoded))  # longest first: the longest form wins


def _blocks(path: Path):
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            yield block


def _replaced(blocks, encoded: list[bytes], into=None) -> tuple[bool, bool]:
    """Stream `blocks` past every form: (found a form, valid UTF-8 throughout); with `into`
    (a binary file) the text with every form replaced is written there as it goes. A block
    is searched with the regex only where a plain substring search (C speed) found a form."""
    pattern, longest = _pattern(encoded), len(encoded[0])
    decoder = codecs.getincrementaldecoder("utf-8")()
    found, text, carry = False, True, b""
    redacted = REDACTED.encode()
    for block in itertools.chain(blocks, [None]):
        if block is not None and text:
            try:
                decoder.decode(block)
            except UnicodeDecodeError:
                text = False
        buf = carry + (block or b"")
        cut = len(buf) if block is None else max(0, len(buf) - (longest - 1))
        out, at = [], 0
        if any(form in buf for form in encoded):
            for match in pattern.finditer(buf):
                if match.start() >= cut:
                    break
                found = True
                out += [buf[at:match.start()], redacted]
                at = match.end()
        at_cut = max(at, cut)
        out.append(buf[at:at_cut])
        carry = buf[at_cut:]
        if into is not None:
            into.write(b"".join(out))
    if text:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            text = False
    return found, text


def holds_any(path: Path, encoded: list[bytes]) -> bool:
    """Does the file hold any form? Streamed: bounded memory for any size."""
    try:
        return _replaced(_blocks(path), encoded)[0]
    except OSError:
        return False


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


def _scrub_sqlite_file(path: Path, encoded: list[bytes]) -> bool:
    wal = path.with_name(path.name + "-wal")
    in_wal = wal.is_file() and holds_any(wal, encoded)
    if not (in_wal or holds_any(path, encoded)):
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
    return holds_any(path, encoded)


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
def _kind(head: bytes) -> str:
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    if head[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    return "other"  # text or binary: told apart while streaming


def _scrub_one(path: Path, encoded: list[bytes]) -> tuple[bool, bool]:
    """(changed, still holds a secret)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False, False
    kind = _kind(head)
    if kind == "sqlite":
        changed = _scrub_sqlite_file(path, encoded)
        return changed, holds_any(path, encoded)
    if kind == "duckdb":
        try:
            changed = _scrub_duckdb(path, encoded)
            return changed, _duckdb_holds(path, encoded)
        except Exception:  # noqa: BLE001 - duckdb's errors have no common base: a store we cannot open is named
            return False, True
    try:
        found, text = _replaced(_blocks(path), encoded)  # scan only: a clean file is never copied
    except OSError:
        return False, False
    if not found:
        return False, False
    if not text:
        return False, True  # never rewritten: a byte-for-byte edit would corrupt what we cannot parse
    mode = path.stat().st_mode
    fresh = path.with_name(f".{path.name}.scrub")
    try:
        with open(fresh, "wb") as out:
            _replaced(_blocks(path), encoded, into=out)
            out.flush()
            os.fsync(out.fileno())
    except OSError:  # no room for the copy: named as still holding one
        fresh.unlink(missing_ok=True)
        return False, True
    os.chmod(fresh, mode & 0o7777)
    os.replace(fresh, path)
    return True, holds_any(path, encoded)


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
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):  # no link is followed
        dirnames.sort()
        found += [Path(dirpath) / name for name in filenames]
    paths = [p for p in sorted(found) if p not in tail] + tail
    return scrub_files(paths, secrets)
