"""The secrets out of an SQLite file the agent left, by its bytes: no SQL engine ever opens it.

Why bytes, not SQL: an SQLite file is a program as much as data. An UPDATE fires its
triggers (one of 12 KiB grew to 1.5 GB in the launcher's TMPDIR), a SELECT runs its
views, a generated column or an expression index runs on every row, and the schema
itself is parsed by the engine. `PRAGMA trusted_schema = OFF` stops none of that
growth. So the scrub never hands the file to SQLite:

- the WAL is folded into the main file the way a checkpoint does it (each frame whose
  salts match the WAL header's, up to the last commit frame, written at its page's
  offset; SQLite also checks each frame's checksum, which only a torn frame — a power
  cut — fails), then the -wal, -journal and -shm files are removed;
- every form of a secret is replaced by filler of the same length (`filler`), in place:
  a text or blob keeps its length, so every record header, cell and page stays valid
  (an index over a redacted value may be left out of order: it is the agent's file);
- a value longer than a page continues on overflow pages, so a form can be split
  between a page and the next one in its chain: each b-tree is walked from its root
  (page 1 and the roots sqlite_master names), each cell's payload read across its
  overflow chain, and a form found there is overwritten in each piece;
- the whole file is then scanned as plain bytes (freelist pages, freed cells, unused
  space), and scanned again: a file still holding a form is named and the caller fails
  closed.

Everything is bounded by the file's own size: pages visited once each, chains cut at
the page count, payloads streamed.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

MAGIC = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_CHUNK = 1 << 20


class NotSqlite(Exception):
    """The header is not one a scrub by page can trust (a page size SQLite never writes), or a WAL
    that claims pages it does not hold."""


class TooSlow(NotSqlite):
    """The scrub ran past its budget: the caller fails closed, as for a file it cannot trust."""


BUDGET_S = 240.0  # one file's scrub, all passes together: the post-run's 300 s holds with room to spare


class _Clock:
    def __init__(self, budget_s: float) -> None:
        import time

        self._now = time.monotonic
        self.deadline = self._now() + budget_s

    def check(self) -> None:
        if self._now() > self.deadline:
            raise TooSlow(f"the scrub ran past its {BUDGET_S:g} s")


def filler(length: int) -> bytes:
    """What replaces a form: as long as the form, so no length in the file changes."""
    return (b"[redacted]" + b"*" * length)[:length]


# -- the header and the WAL -----------------------------------------------------------------
def _page_size(header: bytes) -> tuple[int, int]:
    if len(header) < 100 or not header.startswith(MAGIC):
        raise NotSqlite("no SQLite header")
    size = struct.unpack(">H", header[16:18])[0]
    size = 65536 if size == 1 else size
    if size < 512 or size & (size - 1):
        raise NotSqlite(f"page size {size}")
    reserved = header[20]
    if size - reserved < 480:
        raise NotSqlite("reserved space past what SQLite allows")
    return size, size - reserved


def fold_wal(db: int, wal: int) -> int:
    """The WAL's committed frames written into the main file `db` (both open descriptors), as a
    checkpoint does; the file cut to the last commit's size. The pages written."""
    head = os.pread(wal, 32, 0)
    if len(head) < 32:
        return 0
    magic, _, page_size, _, salt1, salt2 = struct.unpack(">6I", head[:24])
    if magic not in _WAL_MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return 0
    frame = 24 + page_size
    wal_size = os.fstat(wal).st_size
    pending: list[tuple[int, int]] = []  # (page number, the frame's offset in the WAL)
    committed: dict[int, int] = {}
    db_pages = None
    at = 32
    while at + frame <= wal_size:
        page, size_after, s1, s2 = struct.unpack(">4I", os.pread(wal, 16, at))
        if (s1, s2) != (salt1, salt2) or page == 0:
            break  # a frame of an older WAL generation: the log ends here
        pending.append((page, at + 24))
        if size_after:  # a commit frame: everything before it counts
            committed.update(pending)
            pending, db_pages = [], size_after
        at += frame
    if db_pages is not None:
        # A checkpoint grows the file only by pages the log holds: every page past the file's end,
        # up to the last commit's size, is one of its frames. A commit claiming more (a 72 KiB WAL
        # that named page 2**19) would have the fold write a file of the agent's claimed size
        # (issue 60): refused, and the caller fails closed.
        old = os.fstat(db).st_size // page_size
        if db_pages > old and (db_pages - old > len(committed)
                               or any(p not in committed for p in range(old + 1, db_pages + 1))):
            raise NotSqlite(f"the WAL's last commit makes the file {db_pages} pages; the file and the log hold "
                            f"{old} and {len(committed)}")
        committed = {page: offset for page, offset in committed.items() if page <= db_pages}
    for page, offset in sorted(committed.items()):
        data = os.pread(wal, page_size, offset)
        os.pwrite(db, data, (page - 1) * page_size)
    if db_pages is not None:
        os.ftruncate(db, db_pages * page_size)
    return len(committed)


# -- the b-trees --------------------------------------------------------------------------
def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at `at`: (value, the offset after it)."""
    value = 0
    for i in range(8):
        if at + i >= len(buf):
            raise IndexError
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    if at + 8 >= len(buf):
        raise IndexError
    return (value << 8) | buf[at + 8], at + 9


class _File:
    def __init__(self, fd: int, clock: _Clock | None = None) -> None:
        self.fd = fd
        self.size, self.usable = _page_size(os.pread(fd, 100, 0))
        self.pages = os.fstat(fd).st_size // self.size
        self.clock = clock or _Clock(BUDGET_S)
        # Every overflow page belongs to one chain: a page met twice is a loop or a shared chain,
        # which ends the chain there. Each page is followed once in the whole file: linear (a
        # 512 KiB file of looping chains took 1,652 s when each chain was cut at the page count).
        self.claimed: set[int] = set()

    def page(self, number: int) -> bytes:
        return os.pread(self.fd, self.size, (number - 1) * self.size)

    def base(self, number: int) -> int:
        return (number - 1) * self.size


def _local(kind: int, payload: int, usable: int) -> int:
    """The bytes of a payload stored on its b-tree page (SQLite's formula, fileformat2 §1.6)."""
    x = usable - 35 if kind == 13 else (usable - 12) * 64 // 255 - 23
    if payload <= x:
        return payload
    m = (usable - 12) * 32 // 255 - 23
    k = m + (payload - m) % (usable - 4)
    return k if k <= x else m


def _cells(f: _File, number: int) -> Iterator[tuple[list[tuple[int, int]] | None, int | None]]:
    """One b-tree page's cells: (the payload's pieces as (file offset, length), across its
    overflow chain; a child page), the right-most child last. A cell the page cannot hold ends
    the page (its bytes are still scanned plainly)."""
    buf = f.page(number)
    hdr = 100 if number == 1 else 0
    kind = buf[hdr]
    if kind not in (2, 5, 10, 13):
        return
    cells = struct.unpack(">H", buf[hdr + 3:hdr + 5])[0]
    interior = kind in (2, 5)
    ptrs = hdr + (12 if interior else 8)
    for i in range(cells):
        try:
            at = struct.unpack(">H", buf[ptrs + 2 * i:ptrs + 2 * i + 2])[0]
            child = None
            if interior:
                child = struct.unpack(">I", buf[at:at + 4])[0]
                at += 4
                if kind == 5:  # a table's interior cell: a child and a key, no payload
                    yield None, child
                    continue
            payload, at = _varint(buf, at)
            if kind == 13:
                _, at = _varint(buf, at)  # the rowid
        except (IndexError, struct.error):
            return
        local = _local(kind, payload, f.usable)
        if at + local > f.usable:
            return
        pieces = [(f.base(number) + at, local)]
        if local < payload and at + local + 4 <= f.usable:
            nxt = struct.unpack(">I", buf[at + local:at + local + 4])[0]
            left = payload - local
            while 0 < nxt <= f.pages and left > 0 and nxt not in f.claimed:
                f.claimed.add(nxt)
                take = min(left, f.usable - 4)
                pieces.append((f.base(nxt) + 4, take))
                left -= take
                nxt = struct.unpack(">I", os.pread(f.fd, 4, f.base(nxt)))[0]
            f.clock.check()
        yield pieces, child
    if interior:
        yield None, struct.unpack(">I", buf[hdr + 8:hdr + 12])[0]


def _read_payload(fd: int, pieces: list[tuple[int, int]], start: int, n: int) -> bytes:
    """`n` bytes of a payload from its offset `start`, wherever its pieces lie."""
    out, at = b"", 0
    for offset, length in pieces:
        if len(out) >= n:
            break
        if at + length > start:
            skip = max(0, start - at)
            out += os.pread(fd, min(length - skip, n - len(out)), offset + skip)
        at += length
    return out


def _rootpage(fd: int, pieces: list[tuple[int, int]]) -> int | None:
    """Column 4 (rootpage) of an sqlite_master record, read through its pieces."""
    head = _read_payload(fd, pieces, 0, 9)
    try:
        size, at = _varint(head, 0)
        header = _read_payload(fd, pieces, 0, min(size, 1 << 16))
        types = []
        while at < size and len(types) < 4:
            t, at = _varint(header, at)
            types.append(t)
    except IndexError:
        return None
    widths = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}
    if len(types) < 4 or types[3] not in (1, 2, 3, 4, 5, 6):
        return None
    body = size + sum(widths.get(t, (t - 12) // 2 if t >= 12 else 0) for t in types[:3])
    raw = _read_payload(fd, pieces, body, widths[types[3]])
    return int.from_bytes(raw, "big", signed=True) if len(raw) == widths[types[3]] else None


def _tree(f: _File, root: int, seen: set[int]) -> Iterator[tuple[int, list[tuple[int, int]]]]:
    """Every cell's payload pieces in the b-tree at `root`, each page once: (its page, pieces)."""
    stack = [root]
    while stack:
        number = stack.pop()
        if number in seen or number in f.claimed or not 1 <= number <= f.pages:
            continue
        seen.add(number)
        f.clock.check()
        for pieces, child in _cells(f, number):
            if child:
                stack.append(child)
            if pieces:
                yield number, pieces


def _overflowing(f: _File) -> Iterator[list[tuple[int, int]]]:
    """The pieces of every payload that continues on overflow pages: the schema's b-tree (page 1)
    first, then every table's and index's from the root it names; then every chain left on pages
    no live b-tree holds (a deleted row's overflow pages, on the freelist: a value split across
    two of them is no plain run of bytes), each page once."""
    seen: set[int] = set()
    roots = []
    for _, pieces in _tree(f, 1, seen):
        if len(pieces) > 1:
            yield pieces
        root = _rootpage(f.fd, pieces)
        if root is not None and 1 < root <= f.pages:
            roots.append(root)
    for root in roots:
        for _, pieces in _tree(f, root, seen):
            if len(pieces) > 1:
                yield pieces
    yield from _orphan_chains(f, seen)


def _orphan_chains(f: _File, live: set[int]) -> Iterator[list[tuple[int, int]]]:
    """Chains of pages no live b-tree or overflow chain holds, followed as overflow pages are (a
    next page's number in the first 4 bytes, content after it): each page in one chain at most."""
    for start in range(2, f.pages + 1):
        if start in live or start in f.claimed:
            continue
        pieces, page = [], start
        while 0 < page <= f.pages and page not in live and page not in f.claimed:
            f.claimed.add(page)
            pieces.append((f.base(page) + 4, f.usable - 4))
            page = struct.unpack(">I", os.pread(f.fd, 4, f.base(page)))[0]
        f.clock.check()
        if len(pieces) > 1:
            yield pieces


# -- the replacement ------------------------------------------------------------------------
def _pieces_matches(fd: int, pieces: list[tuple[int, int]], longest: int, pattern, write: bool) -> int:
    """A payload streamed across its pieces; each form found (and with `write`, overwritten
    byte by byte where its bytes lie: the pieces are on different pages)."""
    carry, carry_at, found = b"", [], 0
    for offset, length in pieces:
        done = 0
        while done < length:
            block = os.pread(fd, min(_CHUNK, length - done), offset + done)
            if not block:
                break
            base, buf = offset + done, carry + block

            def where(i: int, base=base, carry=carry, carry_at=carry_at) -> int:
                return carry_at[i] if i < len(carry) else base + i - len(carry)

            for match in pattern.finditer(buf):
                found += 1
                if not write:
                    return found
                fill = filler(match.end() - match.start())
                for i in range(match.start(), match.end()):
                    os.pwrite(fd, fill[i - match.start():i - match.start() + 1], where(i))
            keep = min(len(buf), longest - 1)
            carry_at = [where(i) for i in range(len(buf) - keep, len(buf))]
            carry = b"".join(os.pread(fd, 1, at) for at in carry_at) if write else buf[len(buf) - keep:]
            done += len(block)
    return found


def _plain_matches(fd: int, longest: int, pattern, write: bool) -> int:
    """Every form in the file's bytes as they lie (across chunk edges); with `write`, overwritten in place."""
    size = os.fstat(fd).st_size
    found, at, carry = 0, 0, b""
    while at < size:
        block = os.pread(fd, _CHUNK, at)
        if not block:
            break
        buf, start = carry + block, at - len(carry)
        for match in pattern.finditer(buf):
            found += 1
            if not write:
                return found
            os.pwrite(fd, filler(match.end() - match.start()), start + match.start())
        keep = min(len(buf), longest - 1)
        carry = os.pread(fd, keep, start + len(buf) - keep) if keep else b""
        at += len(block)
    return found


def scrub(fd: int, encoded: list[bytes], pattern, budget_s: float = BUDGET_S) -> int:
    """The forms out of the SQLite file open read-write at `fd`, in place: values continued on
    overflow pages (live or freed) first, then the plain bytes. The forms found (NotSqlite: a
    header no page walk can trust; TooSlow: past its budget; the caller then fails closed)."""
    clock = _Clock(budget_s)
    f, longest = _File(fd, clock), len(encoded[0])
    found = 0
    for pieces in _overflowing(f):
        found += _pieces_matches(fd, pieces, longest, pattern, True)
        clock.check()
    return found + _plain_matches(fd, longest, pattern, True)


def holds(fd: int, encoded: list[bytes], pattern, budget_s: float = BUDGET_S) -> bool:
    """Does a form remain, as plain bytes or across an overflow chain, live or freed? (reads only;
    TooSlow past its budget)"""
    longest = len(encoded[0])
    if _plain_matches(fd, longest, pattern, False):
        return True
    try:
        f = _File(fd, _Clock(budget_s))
    except TooSlow:
        raise
    except NotSqlite:
        return False
    return any(_pieces_matches(fd, pieces, longest, pattern, False) for pieces in _overflowing(f))
