"""Inside the sandbox, ahead of the agent: set its resource limits; in its network
namespace, bind 127.0.0.1:PORT for each allowed port and hand the listening sockets to the
host side (over the Unix socket DIR/listeners.sock, SCM_RIGHTS); then exec the command.

    python -I inside.py [--rlimit nproc=N,fsize=B,as=B] [--net DIR PORT[,PORT...]] -- COMMAND...

No forwarder stays inside: the host side accepts on those sockets itself, so nothing the
agent can kill or replace stands between opencode and the served model, and the ports stay
bound by sockets no agent process holds (it cannot bind them again).

Standard library only, run by file path with -I: inside the sandbox the interpreter's
site-packages may point at a checkout the sandbox does not show.
"""

from __future__ import annotations

import os
import socket
import sys

CONTROL = "listeners.sock"  # in the bridge's folder: where the listening sockets are handed over
ACK = b"k"


_RLIMITS = {"nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE", "as": "RLIMIT_AS"}


def _set_limits(spec: str) -> None:
    """Soft and hard, before the agent's first instruction: without a capability it cannot raise them."""
    import resource

    for item in filter(None, spec.split(",")):
        name, value = item.split("=", 1)
        limit = int(value)
        resource.setrlimit(getattr(resource, _RLIMITS[name]), (limit, limit))


def _listen(ports: str) -> list[socket.socket]:
    listeners = []
    for port in (int(p) for p in ports.split(",") if p):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))  # no SO_REUSEADDR/PORT: nothing can bind the port beside it
        sock.listen(64)
        listeners.append(sock)
    return listeners


def _hand_over(folder: str, listeners: list[socket.socket]) -> None:
    """The listening sockets to the host side, which acknowledges once it accepts on them."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as control:
        control.settimeout(60)
        control.connect(os.path.join(folder, CONTROL))
        ports = ",".join(str(s.getsockname()[1]) for s in listeners).encode()
        socket.send_fds(control, [ports], [s.fileno() for s in listeners])
        if control.recv(1) != ACK:
            raise SystemExit("inside.py: the host side did not take the listening sockets")
    for sock in listeners:
        sock.close()


# A seccomp filter on the agent's processes (opencode and every tool it starts inherit it):
# no descriptor taken from another process (pidfd_getfd: a tool took opencode's stdout and
# wrote forged events into it, hid denials, filled the events file), no ptrace, no reading or
# writing another process's memory. Each is refused with EPERM; every other call is allowed.
_ARCHES = {  # AUDIT_ARCH_*: (ptrace, process_vm_readv, process_vm_writev, pidfd_getfd)
    "x86_64": (0xC000003E, (101, 310, 311, 438)),
    "aarch64": (0xC00000B7, (117, 270, 271, 438)),
}
_X32 = 0x40000000  # x86_64's x32 calls: the same numbers with this bit, refused whole


def _seccomp_program(arch: int, denied: tuple[int, ...], x32: bool) -> bytes:
    """A classic BPF program for seccomp: another architecture's calls refused, `denied` → EPERM."""
    import struct

    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm, kill = 0x7FFF0000, 0x00050001, 0x80000000  # KILL_PROCESS: a call of another ABI
    tail = 2  # the last two instructions: ALLOW, then EPERM
    body = [(jge, 0, 0, _X32)] if x32 else []
    body += [(jeq, 0, 0, nr) for nr in denied]
    program = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    for i, (code, _, _, k) in enumerate(body):
        to_eperm = len(body) - i - 1 + 1  # past the rest of the body and the ALLOW
        program.append((code, to_eperm, 0, k))
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    assert len(program) == 4 + len(body) + tail
    return b"".join(struct.pack("HBBI", *insn) for insn in program)


def _deny_fd_theft() -> None:
    import ctypes
    import platform

    machine = platform.machine()
    if machine not in _ARCHES:
        raise SystemExit(f"inside.py: no seccomp filter for {machine}: the sandbox will not start without one")
    arch, denied = _ARCHES[machine]
    code = _seccomp_program(arch, denied, machine == "x86_64")
    buf = ctypes.create_string_buffer(code, len(code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if (libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0
            or libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(prog), 0, 0) != 0):
        raise SystemExit(f"inside.py: the seccomp filter was refused ({os.strerror(ctypes.get_errno())})")


def main(argv: list[str]) -> None:
    limits, net = "", None
    while argv and argv[0] != "--":
        if argv[0] == "--rlimit" and len(argv) > 1:
            limits, argv = argv[1], argv[2:]
        elif argv[0] == "--net" and len(argv) > 2:
            net, argv = (argv[1], argv[2]), argv[3:]
        else:
            raise SystemExit(f"inside.py: unknown argument {argv[0]}")
    command = argv[1:]
    if not argv or not command:
        raise SystemExit("usage: inside.py [--rlimit K=V,...] [--net DIR PORT[,PORT...]] -- COMMAND...")
    if net:
        _hand_over(net[0], _listen(net[1]))
    _set_limits(limits)
    if sys.platform == "linux":
        _deny_fd_theft()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
