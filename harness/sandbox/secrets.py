"""Keep secrets out of what a run leaves behind.

The agent needs the unit's key in its environment (opencode reads `{env:VOT_API_KEY}`),
so a model that runs `env` or echoes it puts the key into opencode's events, its SQLite
store, its logs, its report, or (sent to a shop endpoint) the mission's DuckDB store.
After the run, each file is scrubbed by what it is:

- UTF-8 text: every form of each secret (`secret_forms`: as is, reversed, ROT13, UTF-16, hex,
  base64/32/85 at every alignment, URL-encoded) replaced by `[redacted]`, streamed into a new
  file created O_EXCL under a random name beside it and renamed over it (`fd_files`; memory
  stays bounded by one chunk, whatever the agent wrote);
- SQLite: never opened by SQLite (a trigger, a view, a generated column or an expression
  index would run in the launcher): its WAL folded in and every form overwritten by filler
  of the same length, by bytes, in a new file beside it (`sqlitebytes`: why, and how a
  value split across overflow pages is found);
- DuckDB: scrubbed in a private copy with every function schema-qualified, a file carrying
  code an UPDATE would run refused (`scrub_duckdb`);
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

import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.paths import RUN_RECORD
from harness.sandbox import agentfs, sqlitebytes
from harness.sandbox.fd_files import (copy_extents, fd_blocks, fd_holds, is_sparse, open_file, unlink, writable,
                                      write_beside, Writer)
from harness.sandbox.scrub_duckdb import scrub_duckdb_at
from harness.sandbox.secret_forms import REDACTED, forms, holds_text, pattern_of, replaced

_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header's checksum


# -- streaming ---------------------------------------------------------------------------


# -- reading by descriptor --------------------------------------------------------------


# -- SQLite ------------------------------------------------------------------------------


def _scrub_sqlite_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    """An SQLite file (its WAL folded in) scrubbed by bytes into a new file beside it; its -wal,
    -journal and -shm removed. No SQL engine opens it (`sqlitebytes`)."""
    pattern = pattern_of(encoded)
    db = open_file(dir_fd, name)
    if db is None:
        return False, False
    sides = {suffix: open_file(dir_fd, name + suffix) for suffix in ("-wal", "-journal")}
    try:
        try:
            if not (sqlitebytes.holds(db, encoded, pattern)
                    or any(fd is not None and fd_holds(fd, encoded) for fd in sides.values())):
                return False, False
        except sqlitebytes.TooSlow:
            return False, True  # past its budget: named, the caller fails closed

        def fill(out: int) -> None:
            copy_extents(db, out)
            if sides["-wal"] is not None and not is_sparse(os.fstat(sides["-wal"])):
                sqlitebytes.fold_wal(out, sides["-wal"])
            sqlitebytes.scrub(out, encoded, pattern)
            if sqlitebytes.holds(out, encoded, pattern):
                raise _StillHolds

        try:
            write_beside(dir_fd, name, st.st_mode, fill)
        except (_StillHolds, sqlitebytes.NotSqlite):
            return False, True  # named: the caller fails closed
    finally:
        os.close(db)
        for fd in sides.values():
            if fd is not None:
                os.close(fd)
    for suffix in ("-wal", "-journal", "-shm"):
        unlink(dir_fd, name + suffix)
    return True, False


class _StillHolds(Exception):
    pass


# -- DuckDB ------------------------------------------------------------------------------


# -- one entry ---------------------------------------------------------------------------
def _kind(head: bytes) -> str:
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    if head[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    return "other"  # text or binary: told apart while streaming


def _scrub_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    """(changed, still holds a secret) for the regular file `name` in the open folder `dir_fd`."""
    fd = open_file(dir_fd, name)
    if fd is None:
        return False, False
    try:
        head = os.pread(fd, 16, 0)
        kind = _kind(head)
        if is_sparse(os.fstat(fd)):  # never written out in full, nor parsed: its holes would become bytes
            return False, fd_holds(fd, encoded)
        if kind == "other":
            found, text = replaced(fd_blocks(fd), encoded)  # scan only: a clean file is never copied
            if not found:
                return False, False
            if not text:
                return False, True  # never rewritten: a byte-for-byte edit would corrupt what we cannot parse
            write_beside(dir_fd, name, st.st_mode,
                          lambda out: replaced(fd_blocks(fd), encoded, into=Writer(out)))
    finally:
        os.close(fd)
    if kind == "sqlite":
        return _scrub_sqlite_at(dir_fd, name, st, encoded)
    if kind == "duckdb":
        return scrub_duckdb_at(dir_fd, name, st, encoded)
    # Text rewritten: every leftmost-longest match replaced, across chunk edges (the carry), so no
    # form is left to find; the write pass is the check (a third pass over a large file is the cost).
    return True, False


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


def _rename_free(dir_fd: int, name: str, wanted: str) -> None:
    target, n = wanted, 0
    while n < 10_000:  # bounded: a name taken that often is the agent's doing; the rename then fails
        try:
            os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            break
        n += 1
        target = f"{wanted}.{n}"
    writable(dir_fd, lambda: os.rename(name, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd))


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
            if holds_text(attr, encoded) or any(form in value for form in encoded):
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
            if holds_text(os.readlink(entry.name, dir_fd=entry.dir_fd), encoded):
                writable(entry.dir_fd, lambda e=entry: unlink(e.dir_fd, e.name))
                out.changed += 1
                continue
        else:
            out.changed += bool(_scrub_xattrs(entry.dir_fd, entry.name, entry.st, encoded))
        if entry.is_file and not (entry.depth == 1 and entry.name in last):
            changed, holds = _scrub_at(entry.dir_fd, entry.name, entry.st, encoded)
            out.changed += changed
            if holds:
                out.left.append(entry.rel)
        if holds_text(entry.name, encoded):
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
