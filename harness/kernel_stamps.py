"""The kernel's receive time of a socket read (Linux SO_TIMESTAMPNS), and the socket that
reads with it, shared by the load client (when a chunk arrived) and the timed replay
server (when a request arrived)."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
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


class StampedSocket:
    """A connected non-blocking socket driven by the loop's reader/writer callbacks, read with
    recvmsg so that every read carries the kernel's receive time, and written straight to
    send() with what does not fit buffered until the socket drains.

    The load client and the timed replay server each subclass it for what a read, an end of
    stream, a broken socket and a drained buffer mean to them (`received`, `at_eof`,
    `broken`, `drained`, `on_close`); the socket handling itself is here once.
    """

    read_size = 1 << 16

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop, self.sock = loop, sock
        self.fd = sock.fileno()
        self.out = bytearray()
        self.closed = False
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stamps = sys.platform.startswith("linux")  # the option number is Linux's
        if self.stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.stamps = False

    def start_reading(self) -> None:
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            if self.stamps:
                data, ancillary, _, _ = self.sock.recvmsg(self.read_size, 256)
            else:
                data, ancillary = self.sock.recv(self.read_size), []
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.broken(exc)
            return
        if not data:
            self.at_eof()
            return
        self.received(data, ancillary)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.out:
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self.broken(exc)
            return
        if n < len(data):
            self.out += data[n:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            n = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.broken(exc)
            return
        del self.out[:n]
        if not self.out:
            self.loop.remove_writer(self.fd)
            self.drained()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()
        self.on_close()

    # --- what a subclass decides ---

    def received(self, data: bytes, ancillary: list) -> None:
        raise NotImplementedError

    def at_eof(self) -> None:
        self.close()

    def broken(self, exc: OSError) -> None:
        self.close()

    def drained(self) -> None:
        """The buffered output has all been sent."""

    def on_close(self) -> None:
        """Called once, after the socket is closed."""
