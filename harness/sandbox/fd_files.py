"""The agent's files read and rewritten by directory descriptor: a regular file opened without
following a link, read in blocks or by its data extents (a sparse file's holes never read nor
written out), rewritten into a new file created O_EXCL under a random name beside it and renamed
over it. What the scrub (`secrets`, `scrub_duckdb`) touches anything the agent left with."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path

from harness.sandbox.secret_forms import replaced

CHUNK = 1 << 20  # bytes read at a time: the scrub's memory is a few of these, whatever the file's size
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_file(dir_fd: int, name: str) -> int | None:
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


def fd_blocks(fd: int, start: int = 0, end: int | None = None):
    os.lseek(fd, start, os.SEEK_SET)
    left = None if end is None else end - start
    while left is None or left > 0:
        block = os.read(fd, CHUNK if left is None else min(CHUNK, left))
        if not block:
            return
        if left is not None:
            left -= len(block)
        yield block


def extents(fd: int, size: int):
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


def is_sparse(st: os.stat_result) -> bool:
    return st.st_blocks * 512 + (1 << 16) < st.st_size


def fd_holds(fd: int, encoded: list[bytes]) -> bool:
    size = os.fstat(fd).st_size
    return any(replaced(fd_blocks(fd, start, end), encoded)[0] for start, end in extents(fd, size))


def holds_any(path: Path, encoded: list[bytes]) -> bool:
    """Does the file hold any form? Streamed, links never followed: bounded memory for any size."""
    path = Path(path)
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = open_file(parent, path.name)
        if fd is None:
            return False
        try:
            return fd_holds(fd, encoded)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def writable(dir_fd: int, act) -> None:
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


def write_beside(dir_fd: int, name: str, mode: int, fill) -> None:
    """Replace `name` in `dir_fd` by a new file that `fill(fd)` writes: created O_EXCL under a fresh
    random name (nothing the agent planted is opened or followed), then renamed over `name`."""
    tmp = f".{uuid.uuid4().hex}.scrub"
    made: list[int] = []
    writable(dir_fd, lambda: made.append(
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
    for block in fd_blocks(src):
        os.write(dst, block)  # a regular file: a short write is an error raised by os.write


def write_back(private: Path, dir_fd: int, name: str, st: os.stat_result) -> None:
    """A private copy the harness scrubbed, written back over the agent's file (`write_beside`)."""
    src = os.open(private, os.O_RDONLY | os.O_CLOEXEC)
    try:
        write_beside(dir_fd, name, st.st_mode, lambda out: _copy_fd(src, out))
    finally:
        os.close(src)


def unlink(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)  # a link is removed, never followed


def copy_extents(src: int, dst: int) -> None:
    """`src`'s data copied into `dst` at the same offsets, its holes left holes, its size kept."""
    size = os.fstat(src).st_size
    for start, end in extents(src, size):
        at = start
        while at < end:
            block = os.pread(src, min(CHUNK, end - at), at)
            if not block:
                break
            os.pwrite(dst, block, at)
            at += len(block)
    os.ftruncate(dst, size)


class Writer:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
