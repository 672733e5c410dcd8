"""Who opened a connection to the model's port: opencode itself, or a tool the agent ran.

Every process in the sandbox reaches the served model at the same 127.0.0.1:PORT, so a
tool that calls the model (curl, a script) would add its tokens to the run's figures. The
bridge accepts each connection itself (it holds the sandbox's listeners), so it can ask the
kernel who holds the other end: the client socket's inode from the namespace's TCP table,
then the process holding a descriptor of that socket, then what that process is. A turn is
opencode's only when the process is the opencode binary with no opencode among its
ancestors (an opencode a tool started is a tool); anything else is counted apart.

Linux only (procfs); elsewhere, and where the kernel does not answer, the origin is
"unknown" and counted as opencode's, as before: the wire/store check still stands guard.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from pathlib import Path

SIOCGSKNS = 0x894C  # linux/sockios.h: a descriptor of a socket's network namespace
OPENCODE, TOOL, UNKNOWN = "opencode", "tool", "unknown"


def netns_of(sock: socket.socket) -> int | None:
    try:
        fd = fcntl.ioctl(sock.fileno(), SIOCGSKNS)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def pids_in(netns: int | None) -> list[int]:
    """The processes in the network namespace `netns` (every process where None)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if netns is None or os.stat(f"/proc/{name}/ns/net").st_ino == netns:
                pids.append(int(name))
        except OSError:
            continue
    return pids


def _hexaddr(host: str, port: int) -> str:
    return f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}:{port:04X}"


def _socket_inode(pid: int, client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The inode of the client end (local = client, remote = server) in pid's namespace's TCP table."""
    local, remote = _hexaddr(*client), _hexaddr(*server)
    try:
        with open(f"/proc/{pid}/net/tcp", encoding="ascii") as table:
            for line in table:
                fields = line.split()
                if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                    return int(fields[9])
    except (OSError, ValueError):
        return None
    return None


def _holder(pids: list[int], inode: int) -> int | None:
    target = f"socket:[{inode}]"
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return pid
            except OSError:
                continue
    return None


def client_pid(conn: socket.socket) -> int | None:
    """The process holding the other end of `conn`, a loopback TCP connection the bridge accepted."""
    try:
        client, server = conn.getpeername()[:2], conn.getsockname()[:2]
    except OSError:
        return None
    pids = pids_in(netns_of(conn))
    inode = next((i for pid in pids[:8] if (i := _socket_inode(pid, client, server))), None)
    return _holder(pids, inode) if inode else None


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])  # the name may hold spaces and parentheses
    except (OSError, ValueError, IndexError):
        return None


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with the pid, one process for good."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def origin_of(conn: socket.socket, opencode: Path, pinned: list[tuple[int, str | None]] | None = None) -> str:
    """OPENCODE, TOOL or UNKNOWN for a connection to the model's port. With `pinned` (a list the
    caller keeps for one run), the first opencode seen is the run's, for good: the model's first
    call comes before any tool can run, so it is the harness's own opencode; another opencode
    binary (one a tool daemonized, re-parented away from it) is a tool."""
    pid = client_pid(conn)
    if pid is None:
        return UNKNOWN
    binary = str(Path(opencode).resolve())
    if _exe(pid) != binary:
        return TOOL
    ancestor, hops = _parent(pid), 0
    while ancestor and ancestor > 1 and hops < 64:  # an opencode a tool started is a tool
        if _exe(ancestor) == binary:
            return TOOL
        ancestor, hops = _parent(ancestor), hops + 1
    if pinned is not None:
        me = (pid, _started(pid))
        if not pinned:
            pinned.append(me)
        elif pinned[0] != me:
            return TOOL
    return OPENCODE
