"""Reading what the agent wrote: never through a link, never outside its workspace,
never more than a cap.

The agent can leave `REPORT.md -> /srv/secret` or `.obs -> /etc`: a plain `open` would
copy the host file into the run folder. Every component of the path is opened with
O_NOFOLLOW relative to the one before (so a linked folder is refused as well as a
linked file), the last one must be a regular file (a FIFO would block the harness),
and no more than `cap` bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

REPORT_CAP = 1024 * 1024  # bytes: a report is prose and a table, never megabytes
RECORD_CAP = 16 * 1024 * 1024  # the drive record and the query log


class Refused(Exception):
    """The file is not what the harness may read; the message says why (for the record)."""


from harness.escape import escape_controls, escape_name  # noqa: E402,F401 - one escape, used here and re-exported


def relative_inside(relative: str) -> PurePosixPath:
    """`relative` as a path that cannot leave the folder it is relative to (ValueError if it could)."""
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or ".." in path.parts or path == PurePosixPath("."):
        raise ValueError(f"{relative!r} must be a path inside the workspace (relative, without '..')")
    return path


def read_bytes(root: Path, relative: str, cap: int) -> bytes:
    """The bytes of `root/relative`, read without following any link. Raises FileNotFoundError
    when it does not exist, Refused when it is a link, not a regular file, or over `cap`."""
    parts = relative_inside(relative).parts
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nxt = os.open(part, flags | (os.O_NONBLOCK if last else os.O_DIRECTORY), dir_fd=fd)
            except OSError as exc:
                where = "/".join(parts[:i + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                    raise Refused(f"{where} is a symbolic link; the harness follows no link the agent made") from None
                if exc.errno == errno.ENOTDIR:
                    raise Refused(f"{where} is not a folder") from None
                raise
            os.close(fd)
            fd = nxt
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{relative} is not a regular file")
        if info.st_size > cap:
            raise Refused(f"{relative} is {info.st_size:,} bytes, over the {cap:,}-byte cap")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:  # it grew while being read
            raise Refused(f"{relative} is over the {cap:,}-byte cap")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_text(root: Path, relative: str, cap: int) -> str:
    return read_bytes(root, relative, cap).decode("utf-8", errors="replace")


def copy_out(root: Path, relative: str, dest: Path, cap: int) -> None:
    """Copy `root/relative` to `dest` (a harness path) through `read_bytes`."""
    keep_copy(read_bytes(root, relative, cap), dest)


def keep_copy(data: bytes, dest: Path) -> None:
    """Bytes already read from the agent's side, written to `dest` (a harness path) whole or not at all."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
