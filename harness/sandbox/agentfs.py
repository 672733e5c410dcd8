"""Acting on a folder tree the agent wrote, with the launcher's rights, safely.

Everything under the agent's folders is hostile input: links planted where the harness
will write (`.report.md.tmp -> /work/harness/x.py`), trees thousands of folders deep (a
recursive walk dies on Python's recursion limit, a path-based one on PATH_MAX), folders
made unreadable, FIFOs and sockets that block a reader, names with terminal escapes.
So every step here goes by directory file descriptors:

- each component is opened relative to its parent with O_NOFOLLOW (a link is an entry,
  never a way somewhere else), O_DIRECTORY for folders;
- the walk keeps an explicit stack of open folders (no recursion), bounded in depth and
  in entries: past either bound it raises `Unclean`, and the caller fails closed;
- removal needs no bound: a subtree deeper than the fd stack allows is lifted (renamed
  up to the top folder) and taken apart from there.

It runs after every agent process is gone (the sandbox's PID namespace died with it), so
nothing swaps an entry between a check and a use; O_NOFOLLOW holds regardless.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 256  # folders below a walked root; node_modules nests ~20
MAX_ENTRIES = 500_000  # entries a walk visits before it gives up (and the caller fails closed)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unclean(Exception):
    """The tree cannot be vouched for (too deep, too many entries, an entry that would not open)."""


@dataclass
class Entry:
    dir_fd: int  # the open folder holding it: valid only while the walk is at this entry
    name: str
    st: os.stat_result  # lstat: a link is a link
    rel: str  # for messages: relative to the walked root (escape it before printing)
    depth: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)


def open_dir(path: Path | str) -> int:
    """A folder the harness made (a run folder), opened without following a link at its last component."""
    return os.open(path, _DIR)


def open_under(root: Path | str, parts: list[str]) -> int:
    """The folder `root/parts...`, each component opened relative to the one before with
    O_NOFOLLOW (no link on the way, no path longer than one name)."""
    fd = open_dir(root)
    for part in parts:
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry `name` of an open folder as it is (a link is a link); None when it is gone."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _listing(fd: int) -> list[str]:
    return sorted(os.listdir(fd))


def _open_child_dir(parent: int, name: str) -> int:
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except PermissionError:
        # A folder the agent made unreadable (same uid when launched by a user): ours to open again.
        os.chmod(name, 0o700, dir_fd=parent)  # lstat said folder; no agent process is left to swap it
        return os.open(name, _DIR, dir_fd=parent)


def walk(root: Path | str, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES) -> Iterator[Entry]:
    """Every entry under `root`, folders before their contents, sorted by name; no link followed.
    Raises Unclean past `max_depth` or `max_entries`. A consumer may replace a file entry
    (rename over it) while at it, but must not rename a folder entry."""
    root_fd = open_dir(root)
    stack: list[tuple[int, Iterator[str], str]] = [(root_fd, iter(_listing(root_fd)), "")]
    seen = 0
    try:
        while stack:
            fd, names, rel = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            seen += 1
            if seen > max_entries:
                raise Unclean(f"more than {max_entries:,} entries under its folder")
            st = lstat_at(fd, name)
            if st is None:
                continue
            child_rel = f"{rel}/{name}" if rel else name
            yield Entry(fd, name, st, child_rel, len(stack))
            if stat.S_ISDIR(st.st_mode):
                if len(stack) > max_depth:
                    raise Unclean(f"folders nested more than {max_depth} deep under its folder")
                try:
                    child = _open_child_dir(fd, name)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise Unclean(f"a folder would not open: {exc.strerror}") from None
                stack.append((child, iter(_listing(child)), child_rel))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def chown_tree(root: Path, uid: int, gid: int) -> int:
    """`root` and everything under it owned by uid:gid, links themselves (never their targets).
    The number of entries; Unclean where the walk cannot finish."""
    os.chown(root, uid, gid, follow_symlinks=False)
    if not stat.S_ISDIR(os.lstat(root).st_mode):
        return 1
    count = 1
    for entry in walk(root):
        try:
            os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        count += 1
    return count


def remove(path: Path) -> None:
    """`path` gone, whatever the agent built under it: any depth, any count, unreadable folders,
    links (removed, never followed). Its parent is the harness's own folder."""
    path = Path(path)
    parent = open_dir(path.parent)
    try:
        st = lstat_at(parent, path.name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path.name, dir_fd=parent)
            return
        top = _open_child_dir(parent, path.name)
        try:
            _empty(top)
        finally:
            os.close(top)
        os.rmdir(path.name, dir_fd=parent)
    except OSError as exc:  # its text would name the agent's file (the raw key in a name): only its kind
        raise OSError(exc.errno, exc.strerror) from None
    finally:
        os.close(parent)


def _in_writable(dir_fd: int, act) -> None:
    """`act()` in the open folder `dir_fd`; refused (the agent made it 0555: the same uid in a
    user's launch), the folder made writable for its owner and `act` tried once more."""
    try:
        act()
    except PermissionError:
        os.fchmod(dir_fd, stat.S_IMODE(os.fstat(dir_fd).st_mode) | stat.S_IRWXU)
        act()


def _empty(top: int, lift_at: int = MAX_DEPTH) -> None:
    """Everything in the folder `top` removed, holding at most `lift_at` folders open: a folder met
    deeper is renamed up into `top` and taken apart on a later pass."""
    lifted = 0
    while True:
        listing = _listing(top)
        if not listing:
            return
        stack: list[tuple[int, Iterator[str], str | None]] = [(top, iter(listing), None)]
        while stack:
            fd, names, own = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if own is not None:
                    os.close(fd)
                    parent = stack[-1][0]
                    _in_writable(parent, lambda: os.rmdir(own, dir_fd=parent))
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                _in_writable(fd, lambda: os.unlink(name, dir_fd=fd))
                continue
            if len(stack) >= lift_at:
                lifted += 1
                lifted_name = f".lifted-{lifted}-{uuid.uuid4().hex}"
                _in_writable(fd, lambda: os.rename(name, lifted_name, src_dir_fd=fd, dst_dir_fd=top))
                continue
            child = _open_child_dir(fd, name)
            stack.append((child, iter(_listing(child)), name))


def copy_tree(src: Path, dst: Path, max_bytes: int) -> int:
    """`src` (a tree the agent wrote) copied into `dst`, a new folder made here: folders made
    fresh, regular files copied by descriptor (their data only: a hole stays a hole), links
    recreated as links (never followed), FIFOs, sockets and devices left out; bounded as `walk`
    is (Unclean) and by `max_bytes` of apparent size (a file's length, holes included: Unclean
    past it). The bytes counted."""
    os.mkdir(dst, 0o755)
    stack: list[tuple[str, int]] = [("", open_dir(dst))]
    copied = 0
    try:
        for entry in walk(src):
            parent = entry.rel.rsplit("/", 1)[0] if "/" in entry.rel else ""
            while stack[-1][0] != parent:
                os.close(stack.pop()[1])
            here = stack[-1][1]
            if entry.is_dir:
                os.mkdir(entry.name, 0o755, dir_fd=here)
                stack.append((entry.rel, os.open(entry.name, _DIR, dir_fd=here)))
            elif entry.is_link:
                os.symlink(os.readlink(entry.name, dir_fd=entry.dir_fd), entry.name, dir_fd=here)
            elif entry.is_file:
                copied += _copy_file(entry, here, max_bytes - copied)
    finally:
        for _, fd in stack:
            os.close(fd)
    return copied


def _where(entry: Entry) -> str:
    """The top folder an entry is under, as a message may show it (the agent named it)."""
    from harness.sandbox.untrusted import escape_name

    return escape_name(entry.rel.split("/")[0][:120])


def _copy_file(entry: Entry, dst_dir: int, budget: int) -> int:
    """One file's data extents copied at their offsets, its length set: its apparent size counted."""
    if entry.st.st_size > budget:
        raise Unclean(f"more than the copy's byte bound under {_where(entry)}")
    src = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=entry.dir_fd)
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode):
            return 0
        if info.st_size > budget:
            raise Unclean(f"more than the copy's byte bound under {_where(entry)}")
        out = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      entry.st.st_mode & 0o755 | 0o600, dir_fd=dst_dir)
        try:
            at = 0
            while at < info.st_size:
                try:
                    start = os.lseek(src, at, os.SEEK_DATA)
                except OSError:  # ENXIO: only a hole is left
                    break
                end = min(os.lseek(src, start, os.SEEK_HOLE), info.st_size)
                while start < end:
                    block = os.pread(src, min(1 << 20, end - start), start)
                    if not block:
                        break
                    os.pwrite(out, block, start)
                    start += len(block)
                at = end
            os.ftruncate(out, info.st_size)
        finally:
            os.close(out)
        return info.st_size
    finally:
        os.close(src)
