"""The agent's network: a namespace of its own (bwrap --unshare-net) with only loopback
and no route, where the allowed host ports are forwarded and nothing else exists.

Host side (`Bridge`, in the launch process): one Unix socket per allowed port in a
private folder, each connection forwarded to the host's 127.0.0.1:PORT. Sandbox side
(`inside.py`, started by `wrap()` ahead of opencode): 127.0.0.1:PORT listeners
that forward to those sockets. So from inside, the served endpoint, the telemetry query
port and the mission stack's ports answer at their usual URLs; any other host port is
refused (nothing listens there), and the internet and 169.254.169.254 are unreachable
(no route out of the namespace).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from harness.sandbox.identity import AgentIdentity, agent_identity, hand_over
from harness.sandbox.inside import relay
from harness.sandbox.wirelog import WireLog

# Where the bridge's sockets appear inside the sandbox.
INSIDE_DIR = "/run/llms-benchmark-net"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def loopback_ports(values: Iterable[str]) -> list[int]:
    """The ports of every http(s) URL on loopback among `values` (the unit's base URL, the
    agent's environment: the mission's services announce themselves there)."""
    ports: set[int] = set()
    for value in values:
        for word in str(value).split():
            if not word.startswith(("http://", "https://")):
                continue
            try:
                url = urlsplit(word)
                port = url.port
            except ValueError:
                continue
            if url.hostname in LOOPBACK_HOSTS and port:
                ports.add(port)
    return sorted(ports)


def is_loopback_url(url: str) -> bool:
    try:
        return urlsplit(url).hostname in LOOPBACK_HOSTS
    except ValueError:
        return False


class Bridge:
    """Unix sockets in `folder`, one per port, forwarded to the host's 127.0.0.1:port."""

    def __init__(self, ports: list[int], who: AgentIdentity | None = None,
                 wire: tuple[int, WireLog] | None = None) -> None:
        self.ports = list(ports)
        self.wire = wire  # (the model's port, its log): every exchange on that port is logged
        self.folder = Path(tempfile.mkdtemp(prefix="llms-net-"))
        self.connections: Counter[int] = Counter()  # per port, for the record and the tests
        self._listeners: list[socket.socket] = []
        self._relays: list[threading.Thread] = []
        for port in self.ports:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(self.folder / f"{port}.sock"))
            sock.listen(64)
            self._listeners.append(sock)
            threading.Thread(target=self._accept, args=(sock, port), name=f"net-bridge-{port}", daemon=True).start()
        if who is not None:  # the sandbox's forwarder connects as the agent's user
            hand_over([self.folder], who)

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            self.connections[port] += 1
            relay_thread = threading.Thread(target=self._serve, args=(conn, port), daemon=True)
            # Started before it is listed: `close` joins what it lists (a thread joined before its
            # start raises, as a loaded CI run saw when a connection came in as the run ended).
            relay_thread.start()
            self._relays.append(relay_thread)

    def _serve(self, conn: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        if self.wire is None or self.wire[0] != port:
            relay(conn, upstream)
            return
        tap = self.wire[1].tap()
        try:
            relay(conn, upstream, up=tap.up, down=tap.down)
        finally:
            tap.close()

    def close(self, grace_s: float = 5.0) -> None:
        """Stop accepting; give the connections still open `grace_s` to finish (their last
        exchange reaches the wire log), then leave them to die with the sandbox."""
        deadline = time.monotonic() + grace_s
        for thread in list(self._relays):
            thread.join(max(0.0, deadline - time.monotonic()))
        for sock in self._listeners:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class PortsOnly:
    """macOS: no namespace to forward into; the sandbox profile allows these loopback ports only."""

    ports: list[int]


@contextlib.contextmanager
def bridge(kind: str | None, ports: list[int], who: AgentIdentity | None = None,
           wire: tuple[int, WireLog] | None = None) -> Iterator[Bridge | PortsOnly | None]:
    """For one sandboxed opencode run: a Bridge (bwrap), the allowed ports (sandbox-exec),
    or None (the host's network)."""
    if kind == "sandbox-exec":
        yield PortsOnly(ports)
        return
    if kind != "bwrap":
        yield None
        return
    b = Bridge(ports, who or agent_identity(), wire)
    try:
        yield b
    finally:
        b.close()

