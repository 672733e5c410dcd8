"""State files (run records, the ledger, rulings, the results page) are replaced
atomically: a crash mid-write leaves the previous version, never a torn file."""

from __future__ import annotations

import fcntl
import glob
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to a temp file beside `path`, fsync it, then rename it over `path`.

    The temp file is named `.<name>.<pid>.<random>.tmp`: one left by a writer that was
    killed mid-write (its pid no longer running) is removed by the next write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # the rename itself survives a power cut
    return path


def _remove_stale_temps(path: Path) -> None:
    prefix = f".{path.name}."
    for stale in path.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        parts = stale.name[len(prefix):-len(".tmp")].split(".")  # [pid, mkstemp's random part]
        if len(parts) == 2 and parts[0].isdigit() and not _running(int(parts[0])):
            stale.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or not a pid): leave its file alone
    return True


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename is still atomic
    finally:
        os.close(fd)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `<path>.lock` for a read-modify-write of `path` (released
    by the kernel if the holder dies, so a crash never leaves it locked)."""
    path = Path(path)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
