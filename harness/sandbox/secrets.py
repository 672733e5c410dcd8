"""Keep secrets out of what a run leaves behind.

The agent needs the unit's key in its environment (opencode reads `{env:VOT_API_KEY}`),
so a model that runs `env` or echoes it puts the key into opencode's events, its SQLite
store, its logs, its report, or (sent to a shop endpoint) the mission's DuckDB store.
After the run, each file is scrubbed by what it is:

- UTF-8 text: every form of each secret (as is, reversed, ROT13, UTF-16, hex in either
  case, base64, base32 and base85 at every alignment, URL-encoded) replaced by
  `[redacted]`, streamed into a new file created O_EXCL under a random name beside it and
  renamed over it (memory stays bounded by one chunk, whatever the agent wrote);
- SQLite: never opened by SQLite (a trigger, a view, a generated column or an expression
  index would run in the launcher): its WAL folded in and every form overwritten by filler
  of the same length, by bytes, in a new file beside it (`sqlitebytes`: why, and how a
  value split across overflow pages is found);
- DuckDB: copied (holes kept) into a private folder and opened read-only there with external
  access off, the configuration locked, memory and spill bounded, every function the scrub
  calls schema-qualified (`system.main.contains`: an agent's macro of that name is never
  called); a file carrying code that an UPDATE or a copy would run (CHECK constraints,
  generated columns, defaults, indexes) is refused, named, and the launch fails closed;
  otherwise the replacement in every VARCHAR/JSON column and each table copied into a fresh
  file (no old block keeps a copy), written back;
- extended attributes whose name or value holds a form: removed;
- file and folder names and link targets that hold a form: renamed, links removed;
- anything else is never rewritten (a byte-for-byte edit would corrupt it; a sparse file
  is never expanded): a file that still holds a secret is named, and the launch fails
  closed on it (void, the agent's folder removed).

Everything is reached by directory descriptors (`agentfs`): no link is ever followed, no
temporary name is predictable, any depth up to agentfs's bound (past it: `Unclean`).
Forms no scrub can name (compressed, split, every other character) are why the key the
agent sees is the launch's own and dies with the unit.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import functools
import itertools
import os
import re
import stat
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus

from harness.records.paths import RUN_RECORD
from harness.sandbox import agentfs, sqlitebytes

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values ("none", "1") would redact ordinary text
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header's checksum


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


def _group_fragments(secret: bytes, encode, size: int, chars: int) -> set[bytes]:
    """As `_fragments`, for encodings of whole groups (base85: 4 bytes → 5 characters): the
    characters of the groups that lie wholly inside the secret, at every alignment."""
    found = set()
    for lead in range(size):
        encoded = encode(b"\0" * lead + secret + b"\0" * size)
        first = -(-lead // size)  # the first group that starts inside the secret
        last = (lead + len(secret)) // size  # groups before this one end inside it
        fragment = encoded[first * chars:last * chars]
        if len(fragment) >= MIN_SECRET_LEN:
            found.add(fragment)
    return found


def forms(secrets: list[str]) -> list[bytes]:
    """Every form looked for, longest first (a longer one may contain a shorter one)."""
    out: set[bytes] = set()
    for secret in secrets:
        raw = secret.encode()
        out |= {raw, raw[::-1], raw.hex().encode(), raw.hex().upper().encode(),
                quote(secret, safe="").encode(), quote_plus(secret, safe="").encode(),
                codecs.encode(secret, "rot13").encode(), secret.encode("utf-16-le"), secret.encode("utf-16-be")}
        for encode in (base64.b85encode, base64.a85encode):
            out |= _group_fragments(raw, encode, 4, 5)
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            out |= _fragments(raw, encode, 3, 6)
        b32 = _fragments(raw, base64.b32encode, 5, 5)
        out |= b32 | {f.lower() for f in b32}
    return sorted(out, key=len, reverse=True)


# -- streaming ---------------------------------------------------------------------------
CHUNK = 1 << 20  # bytes read at a time: the scrub's memory is a few of these, whatever the file's size


@functools.lru_cache(maxsize=8)
def _compiled(encoded: tuple[bytes, ...]) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(f) for f in encoded))  # longest first: the longest form wins


def _pattern(encoded: list[bytes]) -> re.Pattern[bytes]:
    return _compiled(tuple(encoded))


_SMALL = 1 << 16  # below this, one regex search beats a substring search per form


def _may_hold(buf: bytes, encoded: list[bytes], pattern: re.Pattern[bytes]) -> bool:
    if len(buf) < _SMALL:
        return pattern.search(buf) is not None
    return any(form in buf for form in encoded)  # C-speed scans of a large block


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
        if _may_hold(buf, encoded, pattern):
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


# -- reading by descriptor --------------------------------------------------------------
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_file(dir_fd: int, name: str) -> int | None:
    """A regular file opened without following a link (None: not one, or gone)."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o600, dir_fd=dir_fd)  # the agent's own file made unreadable (a user launch)
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except (FileNotFoundError, OSError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _fd_blocks(fd: int, start: int = 0, end: int | None = None):
    os.lseek(fd, start, os.SEEK_SET)
    left = None if end is None else end - start
    while left is None or left > 0:
        block = os.read(fd, CHUNK if left is None else min(CHUNK, left))
        if not block:
            return
        if left is not None:
            left -= len(block)
        yield block


def _extents(fd: int, size: int):
    """The data extents of a file (start, end): a sparse file's holes are never read."""
    at = 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:  # ENXIO: no data past `at`
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        at = end


def _is_sparse(st: os.stat_result) -> bool:
    return st.st_blocks * 512 + (1 << 16) < st.st_size


def _fd_holds(fd: int, encoded: list[bytes]) -> bool:
    size = os.fstat(fd).st_size
    return any(_replaced(_fd_blocks(fd, start, end), encoded)[0] for start, end in _extents(fd, size))


def holds_any(path: Path, encoded: list[bytes]) -> bool:
    """Does the file hold any form? Streamed, links never followed: bounded memory for any size."""
    path = Path(path)
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = _open_file(parent, path.name)
        if fd is None:
            return False
        try:
            return _fd_holds(fd, encoded)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def _write_beside(dir_fd: int, name: str, mode: int, fill) -> None:
    """Replace `name` in `dir_fd` by a new file that `fill(fd)` writes: created O_EXCL under a fresh
    random name (nothing the agent planted is opened or followed), then renamed over `name`."""
    tmp = f".{uuid.uuid4().hex}.scrub"
    made: list[int] = []
    _writable(dir_fd, lambda: made.append(
        os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)))
    fd = made[0]
    try:
        try:
            fill(fd)
            os.fchmod(fd, mode & 0o777)  # never a set-id bit on a file the launcher rewrote
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _copy_fd(src: int, dst: int) -> None:
    for block in _fd_blocks(src):
        os.write(dst, block)  # a regular file: a short write is an error raised by os.write


def _write_back(private: Path, dir_fd: int, name: str, st: os.stat_result) -> None:
    """A private copy the harness scrubbed, written back over the agent's file (`_write_beside`)."""
    src = os.open(private, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _write_beside(dir_fd, name, st.st_mode, lambda out: _copy_fd(src, out))
    finally:
        os.close(src)


def _unlink(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)  # a link is removed, never followed


# -- SQLite ------------------------------------------------------------------------------
def _quote(identifier: str) -> str:
    """An SQL identifier as a quoted name whatever it holds (a name carrying SQL stays a name)."""
    return '"' + identifier.replace('"', '""') + '"'


def _copy_extents(src: int, dst: int) -> None:
    """`src`'s data copied into `dst` at the same offsets, its holes left holes, its size kept."""
    size = os.fstat(src).st_size
    for start, end in _extents(src, size):
        at = start
        while at < end:
            block = os.pread(src, min(CHUNK, end - at), at)
            if not block:
                break
            os.pwrite(dst, block, at)
            at += len(block)
    os.ftruncate(dst, size)


def _scrub_sqlite_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    """An SQLite file (its WAL folded in) scrubbed by bytes into a new file beside it; its -wal,
    -journal and -shm removed. No SQL engine opens it (`sqlitebytes`)."""
    pattern = _pattern(encoded)
    db = _open_file(dir_fd, name)
    if db is None:
        return False, False
    sides = {suffix: _open_file(dir_fd, name + suffix) for suffix in ("-wal", "-journal")}
    try:
        if not (sqlitebytes.holds(db, encoded, pattern)
                or any(fd is not None and _fd_holds(fd, encoded) for fd in sides.values())):
            return False, False

        def fill(out: int) -> None:
            _copy_extents(db, out)
            if sides["-wal"] is not None and not _is_sparse(os.fstat(sides["-wal"])):
                sqlitebytes.fold_wal(out, sides["-wal"])
            sqlitebytes.scrub(out, encoded, pattern)
            if sqlitebytes.holds(out, encoded, pattern):
                raise _StillHolds

        try:
            _write_beside(dir_fd, name, st.st_mode, fill)
        except (_StillHolds, sqlitebytes.NotSqlite):
            return False, True  # named: the caller fails closed
    finally:
        os.close(db)
        for fd in sides.values():
            if fd is not None:
                os.close(fd)
    for suffix in ("-wal", "-journal", "-shm"):
        _unlink(dir_fd, name + suffix)
    return True, False


class _StillHolds(Exception):
    pass


# -- DuckDB ------------------------------------------------------------------------------
DUCK_MEMORY = "256MB"  # the scrub's DuckDB: its memory and its spill bounded (a macro once took 3.3 GiB)


def _duck_connect(path: Path, read_only: bool = False, attach: Path | None = None):
    """A DuckDB connection that can reach no file but `path` (and `attach`, made before it locks):
    external access off, configuration locked, no extension loaded, one thread, memory and
    spill bounded (its spill in the private folder)."""
    import duckdb

    spill = path.parent / "spill"
    con = duckdb.connect(str(path), read_only=read_only,
                         config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "memory_limit": DUCK_MEMORY, "threads": 1, "temp_directory": str(spill),
                                 "max_temp_directory_size": DUCK_MEMORY})
    if attach is not None:
        con.execute("ATTACH ? AS fresh_copy", [str(attach)])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


class _DuckCode(Exception):
    """A DuckDB file carrying code an UPDATE or a copy would run."""


def _duck_code(con) -> None:
    """Refuse a file whose UPDATE or copy would run its own expressions: CHECK constraints,
    generated columns, defaults, explicit indexes. (Its macros and views are never called:
    every function here is schema-qualified and only base tables are read.)"""
    here = "database_name = system.main.current_database()"
    for what, sql in (
        ("a CHECK constraint", f"SELECT count(*) FROM system.main.duckdb_constraints() WHERE {here} "
                               "AND constraint_type = 'CHECK'"),
        ("a generated column or a default", f"SELECT count(*) FROM system.main.duckdb_columns() WHERE {here} "
                                            "AND (is_generated OR column_default IS NOT NULL)"),
        ("an index", f"SELECT count(*) FROM system.main.duckdb_indexes() WHERE {here}"),
    ):
        if con.execute(sql).fetchone()[0]:
            raise _DuckCode(what)


def _duck_text_columns(con) -> list[tuple[str, str, str, str]]:
    return con.execute(
        "SELECT c.schema_name, c.table_name, c.column_name, c.data_type FROM system.main.duckdb_columns() c "
        "JOIN system.main.duckdb_tables() t ON c.table_oid = t.table_oid "
        "WHERE c.database_name = system.main.current_database() AND NOT c.internal "
        "AND (c.data_type = 'VARCHAR' OR c.data_type = 'JSON')").fetchall()


def _duck_where(column: str, n: int) -> str:
    return " OR ".join([f"system.main.contains(CAST({column} AS VARCHAR), ?)"] * n)


def _duckdb_holds(path: Path, encoded: list[bytes]) -> bool:
    texts = [f.decode() for f in encoded]
    with _duck_connect(path, read_only=True) as con:
        _duck_code(con)
        for schema, table, column, _ in _duck_text_columns(con):
            hit = con.execute(f"SELECT 1 FROM {_quote(schema)}.{_quote(table)} "
                              f"WHERE {_duck_where(_quote(column), len(texts))} LIMIT 1", texts).fetchone()
            if hit:
                return True
    return holds_any(path, encoded)


def _scrub_duckdb(path: Path, encoded: list[bytes]) -> bool:
    """Replace through DuckDB (its strings are compressed: a byte search can miss them), then
    copy each table into a fresh file so no freed block keeps a copy. `path` is a private copy."""
    texts = [f.decode() for f in encoded]
    fresh = path.with_name(path.name + ".fresh")
    changed = 0
    with _duck_connect(path, attach=fresh) as con:
        _duck_code(con)
        for schema, table, column, dtype in _duck_text_columns(con):
            c = _quote(column)
            value = f"CAST({c} AS VARCHAR)"
            for _ in texts:
                value = f"system.main.replace({value}, ?, '{REDACTED}')"
            changed += con.execute(
                f"UPDATE {_quote(schema)}.{_quote(table)} SET {c} = CAST(({value}) AS {dtype}) "
                f"WHERE {_duck_where(c, len(texts))}", [*texts, *texts]).fetchone()[0]
        if changed:
            here = con.execute("SELECT system.main.current_database()").fetchone()[0]
            tables = con.execute("SELECT schema_name, table_name FROM system.main.duckdb_tables() "
                                 "WHERE database_name = ? AND NOT internal", [here]).fetchall()
            for schema, table in tables:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS fresh_copy.{_quote(schema)}")
                con.execute(f"CREATE TABLE fresh_copy.{_quote(schema)}.{_quote(table)} AS "
                            f"SELECT * FROM {_quote(here)}.{_quote(schema)}.{_quote(table)}")
        con.execute("DETACH fresh_copy")
    if changed:
        os.replace(fresh, path)
    return bool(changed)


def _copy_sparse_in(dir_fd: int, name: str, dest: Path) -> bool:
    """The agent's file copied into a private folder of the harness by descriptor, holes kept."""
    fd = _open_file(dir_fd, name)
    if fd is None:
        return False
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _copy_extents(fd, out)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return True


def _scrub_duckdb_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    with tempfile.TemporaryDirectory(prefix="llms-scrub-") as tmp:
        db = Path(tmp) / "db.duckdb"
        _copy_sparse_in(dir_fd, name, db)
        _copy_sparse_in(dir_fd, name + ".wal", Path(tmp) / "db.duckdb.wal")
        try:
            if not _duckdb_holds(db, encoded):
                return False, False
            _scrub_duckdb(db, encoded)
            if _duckdb_holds(db, encoded):
                return False, True
        except Exception:  # noqa: BLE001 - duckdb's errors have no common base; _DuckCode: refused. Named.
            return False, True
        _write_back(db, dir_fd, name, st)
    _unlink(dir_fd, name + ".wal")
    return True, False


# -- one entry ---------------------------------------------------------------------------
def _kind(head: bytes) -> str:
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    if head[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    return "other"  # text or binary: told apart while streaming


def _scrub_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    """(changed, still holds a secret) for the regular file `name` in the open folder `dir_fd`."""
    fd = _open_file(dir_fd, name)
    if fd is None:
        return False, False
    try:
        head = os.pread(fd, 16, 0)
        kind = _kind(head)
        if _is_sparse(os.fstat(fd)):  # never written out in full, nor parsed: its holes would become bytes
            return False, _fd_holds(fd, encoded)
        if kind == "other":
            found, text = _replaced(_fd_blocks(fd), encoded)  # scan only: a clean file is never copied
            if not found:
                return False, False
            if not text:
                return False, True  # never rewritten: a byte-for-byte edit would corrupt what we cannot parse
            _write_beside(dir_fd, name, st.st_mode,
                          lambda out: _replaced(_fd_blocks(fd), encoded, into=_Writer(out)))
    finally:
        os.close(fd)
    if kind == "sqlite":
        return _scrub_sqlite_at(dir_fd, name, st, encoded)
    if kind == "duckdb":
        return _scrub_duckdb_at(dir_fd, name, st, encoded)
    # Text rewritten: every leftmost-longest match replaced, across chunk edges (the carry), so no
    # form is left to find; the write pass is the check (a third pass over a large file is the cost).
    return True, False


class _Writer:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


@functools.lru_cache(maxsize=4)
def _forms_of(secrets: tuple[str, ...]) -> list[bytes]:
    return forms(list(secrets))


def redact_text(text: str | None, secrets: list[str]) -> str | None:
    """A message (a reason, a line for the terminal) with every form of each secret replaced."""
    if not text or not secrets:
        return text
    raw = text.encode("utf-8", "surrogateescape")
    for form in _forms_of(tuple(secrets)):
        raw = raw.replace(form, REDACTED.encode())
    return raw.decode("utf-8", "surrogateescape")


def _holds_text(value: str, encoded: list[bytes]) -> bool:
    raw = os.fsencode(value)
    return any(form in raw for form in encoded)


def _redacted_name(name: str, encoded: list[bytes]) -> str:
    raw = os.fsencode(name)
    for form in encoded:
        raw = raw.replace(form, REDACTED.encode())
    return os.fsdecode(raw)


# -- the walk ----------------------------------------------------------------------------
@dataclass
class Scrubbed:
    changed: int = 0
    left: list[str] = field(default_factory=list)  # relative to the walked root


def _writable(dir_fd: int, act) -> None:
    """`act()` in the open folder `dir_fd`; refused (a folder the agent made 0555, in a user's
    launch: the same uid), the folder made writable for its owner and `act` tried once more.
    An error raised says only its kind: its text would carry the name, the raw key in it."""
    try:
        act()
        return
    except PermissionError:
        pass
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror) from None
    try:
        os.fchmod(dir_fd, stat.S_IMODE(os.fstat(dir_fd).st_mode) | stat.S_IRWXU)
        act()
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror) from None


def _rename_free(dir_fd: int, name: str, wanted: str) -> None:
    target, n = wanted, 0
    while n < 10_000:  # bounded: a name taken that often is the agent's doing; the rename then fails
        try:
            os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            break
        n += 1
        target = f"{wanted}.{n}"
    _writable(dir_fd, lambda: os.rename(name, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd))


_XATTR_OPEN = {stat.S_IFREG: os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
               stat.S_IFDIR: os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC}
XATTR_CAP = 64 << 10  # bytes of one attribute's value read (the kernel's own bound)


def _scrub_xattrs(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> int:
    """The extended attributes of a file or folder whose name or value holds a form: removed
    (a value is the agent's bytes: nothing to keep). The attributes removed."""
    flags = _XATTR_OPEN.get(stat.S_IFMT(st.st_mode))
    if flags is None or not hasattr(os, "listxattr"):
        return 0
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return 0
    removed = 0
    try:
        try:
            names = os.listxattr(fd)
        except OSError:
            return 0
        for attr in names:
            try:
                value = os.getxattr(fd, attr)[:XATTR_CAP]
            except OSError:
                value = b""
            if _holds_text(attr, encoded) or any(form in value for form in encoded):
                try:
                    os.removexattr(fd, attr)
                except OSError as exc:
                    raise OSError(exc.errno, f"an extended attribute could not be removed ({exc.strerror})") from None
                removed += 1
    finally:
        os.close(fd)
    return removed


class PastDeadline(agentfs.Unclean):
    """The scrub ran past its time bound: what it did not reach cannot be vouched for."""


def scrub_tree(root: Path, secrets: list[str], last: tuple[str, ...] = (RUN_RECORD,),
               deadline: float | None = None) -> tuple[int, list[str]]:
    """Every file under `root` by descriptor (no link followed, any depth up to agentfs's bound:
    past it `agentfs.Unclean` is raised and the caller fails closed), those named in `last`
    (at the top) after the rest; names and link targets holding a form renamed or removed,
    extended attributes holding one removed. Past `deadline` (time.monotonic) `PastDeadline`.
    (files changed, paths relative to `root` that still hold a secret)."""
    if not secrets or not Path(root).is_dir():
        return 0, []
    root, encoded, out = Path(root), forms(secrets), Scrubbed()
    names: list[tuple[str, int]] = []  # folders whose names hold a form: renamed deepest first, after the walk
    for entry in agentfs.walk(root):
        if deadline is not None and time.monotonic() > deadline:
            raise PastDeadline("the scrub passed its time bound")
        if entry.is_link:
            if _holds_text(os.readlink(entry.name, dir_fd=entry.dir_fd), encoded):
                _writable(entry.dir_fd, lambda e=entry: _unlink(e.dir_fd, e.name))
                out.changed += 1
                continue
        else:
            out.changed += bool(_scrub_xattrs(entry.dir_fd, entry.name, entry.st, encoded))
        if entry.is_file and not (entry.depth == 1 and entry.name in last):
            changed, holds = _scrub_at(entry.dir_fd, entry.name, entry.st, encoded)
            out.changed += changed
            if holds:
                out.left.append(entry.rel)
        if _holds_text(entry.name, encoded):
            if entry.is_dir:
                names.append((entry.rel, entry.depth))
            else:
                _rename_free(entry.dir_fd, entry.name, _redacted_name(entry.name, encoded))
                out.changed += 1
    for rel, _ in sorted(names, key=lambda item: -item[1]):
        *parents, name = rel.split("/")
        fd = agentfs.open_under(root, parents)
        try:
            _rename_free(fd, name, _redacted_name(name, encoded))
            out.changed += 1
        finally:
            os.close(fd)
    changed, left = scrub_files([root / name for name in last], secrets)
    return out.changed + changed, [*out.left, *(str(Path(p).relative_to(root)) for p in left)]


def scrub_files(paths: Iterable[Path], secrets: list[str]) -> tuple[int, list[str]]:
    """(files changed, files that still hold a secret afterwards), in the order given: each
    opened through its folder without following a link at its name."""
    if not secrets:
        return 0, []
    encoded = forms(secrets)
    changed, left = 0, []
    for path in map(Path, paths):
        try:
            parent = agentfs.open_dir(path.parent)
        except OSError:
            continue
        try:
            st = agentfs.lstat_at(parent, path.name)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            did, holds = _scrub_at(parent, path.name, st, encoded)
            changed += did
            if holds:
                left.append(str(path))
        finally:
            os.close(parent)
    return changed, left
