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
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
