"""Inside the sandbox, ahead of the agent: set its resource limits; in its network
namespace, listen on 127.0.0.1:PORT for each allowed port and forward each connection to
the Unix socket DIR/PORT.sock (the host side connects it to the host's 127.0.0.1:PORT);
then exec the command.

    python -I inside.py [--rlimit nproc=N,fsize=B,as=B] [--net DIR PORT[,PORT...]] -- COMMAND...

Standard library only, run by file path with -I: inside the sandbox the interpreter's
site-packages may point at a checkout the sandbox does not show. The listeners are bound
before the command starts; the forwarding runs in a forked child that dies with the
sandbox's PID namespace when the command exits.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

CHUNK = 65536  # forwarded as soon as read: a streamed (SSE) answer is never held back


def _pump(src: socket.socket, dst: socket.socket, observe=None) -> None:
    try:
        while data := src.recv(CHUNK):
            if observe is not None:  # before forwarding: a request is seen before its answer can be
                try:
                    observe(data)  # the host side's wire log: a failure of it never stops the bytes
                except Exception:  # noqa: BLE001
                    observe = None
            dst.sendall(data)
    except OSError:
        pass
    finally:
        if observe is not None:
            try:
                observe(b"")  # the end of this direction: a close-delimited answer ends here
            except Exception:  # noqa: BLE001
                pass
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _serve(conn: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        upstream.close()
        return
    relay(conn, upstream)


def relay(conn: socket.socket, upstream: socket.socket, up=None, down=None) -> None:
    """Copy both ways until each side has finished sending, then close both; `up`/`down`
    see each chunk just before it is forwarded. Shared with the host side (harness/sandbox/net.py),
    which imports it: this file stays stdlib only."""
    back = threading.Thread(target=_pump, args=(upstream, conn, down), daemon=True)
    back.start()
    _pump(conn, upstream, up)
    back.join()
    conn.close()
    upstream.close()


def _accept(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, path), daemon=True).start()


_RLIMITS = {"nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE", "as": "RLIMIT_AS"}


def _set_limits(spec: str) -> None:
    """Soft and hard, before the agent's first instruction: without a capability it cannot raise them."""
    import resource

    for item in filter(None, spec.split(",")):
        name, value = item.split("=", 1)
        limit = int(value)
        resource.setrlimit(getattr(resource, _RLIMITS[name]), (limit, limit))


def _listen(folder: str, ports: str) -> list[tuple[socket.socket, str]]:
    listeners = []
    for port in (int(p) for p in ports.split(",") if p):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        listeners.append((sock, os.path.join(folder, f"{port}.sock")))
    return listeners


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
    listeners = _listen(*net) if net else []
    _set_limits(limits)
    if listeners and os.fork() == 0:  # the forwarder; the command keeps this PID (its exit status is the sandbox's)
        os.setsid()
        threads = [threading.Thread(target=_accept, args=pair, daemon=True) for pair in listeners]
        for t in threads:
            t.start()
        threading.Event().wait()
    for sock, _ in listeners:
        sock.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
