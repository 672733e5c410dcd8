"""Hand a server its API key through a file that never holds it on disk.

llama.cpp's server reads `--api-key-file` once at start. The "file" is a FIFO in a
private 0700 folder: a thread writes the key when the server opens it, then removes
the FIFO and its folder. Nothing is left to scrub; the key is on no command line.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

HANDOVER_TIMEOUT_S = 120.0  # the server opens its key file while parsing flags, long before the model loads


def key_fifo(key: str, timeout_s: float = HANDOVER_TIMEOUT_S) -> Path:
    """A path to give as --api-key-file; readable once, gone afterwards (or after `timeout_s`)."""
    folder = Path(tempfile.mkdtemp(prefix="llms-key-"))
    path = folder / "api-key"
    os.mkfifo(path, 0o600)
    threading.Thread(target=_hand_over, args=(path, key, timeout_s), name="api-key-handover", daemon=True).start()
    return path


def _hand_over(path: Path, key: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until the reader opens it
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    return
                time.sleep(0.05)
                continue
            try:
                os.set_blocking(fd, True)
                os.write(fd, f"{key}\n".encode())
            except OSError:
                pass
            finally:
                os.close(fd)
            return
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
