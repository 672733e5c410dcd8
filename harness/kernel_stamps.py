"""The kernel's receive time of a socket read (Linux SO_TIMESTAMPNS), shared by the load
client (when a chunk arrived) and the timed replay server (when a request arrived)."""

from __future__ import annotations

import socket
import struct
import time

SO_TIMESTAMPNS = 35  # Linux: the kernel's receive time of the data read (SCM_TIMESTAMPNS = the same number)
TIMESPEC = struct.Struct("@qq")
_MAX_AGE_NS = 60_000_000_000  # an older (or future) stamp is a clock jump, not a receive time


def receive_age_ns(ancillary: list) -> int | None:
    """How long ago (CLOCK_REALTIME) the kernel received what recvmsg read; None if it gave no stamp."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            age = time.time_ns() - (sec * 1_000_000_000 + nsec)
            if 0 <= age < _MAX_AGE_NS:
                return age
    return None
