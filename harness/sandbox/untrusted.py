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
import re
import stat
from pathlib import Path, PurePosixPath

REPORT_CAP = 1024 * 1024  # bytes: a report is prose and a table, never megabytes
RECORD_CAP = 16 * 1024 * 1024  # the drive record and the query log


class Refused(Exception):
    """The file is not what the harness may read; the message says why (for the record)."""


# Control characters, and the lone surrogates Python decodes a non-UTF-8 name's bytes to
# (they would crash the record's UTF-8 save: `post-run crashes, run.json still ok`).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_NAME_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character but newline and tab shown as an escape: a file name
    or a model's text printed raw could retitle the terminal or write its clipboard (OSC 0/52);
    a byte that was not UTF-8 shown as its escape, so the text always saves as UTF-8."""
    return _CONTROLS.sub(_escaped, text)


def escape_name(text: str) -> str:
    """A name from the agent's side (a file, a folder, a path) as one printable line: every
    control character escaped, newline and tab included (a name holding a newline forges a
    line on the terminal), bidi overrides too, bytes that were not UTF-8 as their escapes."""
    return _NAME_CONTROLS.sub(_escaped, text)


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
