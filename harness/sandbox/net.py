"""The agent's network: a namespace of its own (bwrap --unshare-net) with only loopback
and no route, where the allowed host ports are forwarded and nothing else exists.

Inside (`inside.py`, started by `wrap()` ahead of opencode): 127.0.0.1:PORT is bound for
each allowed port and the listening sockets are handed to the host side over a Unix socket
(SCM_RIGHTS), before the agent's first instruction. Host side (`Bridge`, in the launch
process): it accepts on those sockets itself and forwards each connection to the host's
127.0.0.1:PORT. So from inside, the served endpoint, the telemetry query port and the
mission stack's ports answer at their usual URLs; any other host port is refused (nothing
listens there), the internet and 169.254.169.254 are unreachable (no route out of the
namespace), and no process of the agent's holds a listener it could kill or take over.

On the model's port every byte is parsed on its way (`wirelog.Tap`): a connection the tap
cannot read as HTTP/1.1 is closed, not relayed, and counted; connections and the bytes
held across them are bounded (MAX_CONNECTIONS, wirelog.BUFFER_BUDGET).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from harness.sandbox.identity import AgentIdentity, agent_identity, hand_over
from harness.sandbox.inside import ACK, CONTROL
from harness.sandbox.peers import netns_of
from harness.sandbox.wirelog import Tap, WireLog

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


HOLD_S = 180.0  # the longest a new connection waits while the model's server is served again
MAX_CONNECTIONS = 64  # open at once through the bridge; opencode keeps a handful alive
CHUNK = 65536  # forwarded as soon as read: a streamed (SSE) answer is never held back


def _pump(src: socket.socket, dst: socket.socket, observe: Callable[[bytes], bool] | None) -> None:
    """src → dst until src ends; `observe` sees each chunk before it is forwarded and may refuse
    it (False): then neither this chunk nor anything after it on the connection goes through."""
    try:
        while data := src.recv(CHUNK):
            if observe is not None and not observe(data):
                for sock in (src, dst):  # the other direction's pump ends on it too
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def relay(conn: socket.socket, upstream: socket.socket, tap: Tap | None = None) -> None:
    """Copy both ways until each side has finished sending, then close both."""
    back = threading.Thread(target=_pump, args=(upstream, conn, tap.down if tap else None), daemon=True)
    back.start()
    _pump(conn, upstream, tap.up if tap else None)
    back.join()
    conn.close()
    upstream.close()


class Bridge:
    """The host side of the agent's network: accepts on the listening sockets the sandbox hands
    over (`CONTROL` in `folder`) and forwards each connection to the host's 127.0.0.1:port."""

    def __init__(self, ports: list[int], who: AgentIdentity | None = None,
                 wire: tuple[int, WireLog] | None = None,
                 origin: Callable[[socket.socket], str] | None = None) -> None:
        self.ports = list(ports)
        self.wire = wire  # (the model's port, its log): every exchange on that port is logged
        self.origin = origin  # who opened a model connection (peers.origin_of): opencode's or a tool's
        self.folder = Path(tempfile.mkdtemp(prefix="llms-net-"))
        self.connections: Counter[int] = Counter()  # per port, for the record and the tests
        self.refused = 0  # connections past MAX_CONNECTIONS, closed at once
        self.handed: threading.Event = threading.Event()  # the sandbox's listeners are ours
        self._open = 0
        self._lock = threading.Lock()
        self._listeners: list[socket.socket] = []
        self._relays: list[threading.Thread] = []
        self._live: dict[int, set[tuple[socket.socket, socket.socket, Tap | None]]] = {}  # per port: open relays
        self._gate = threading.Event()  # cleared by `hold`: new connections wait for `release`
        self._gate.set()
        self._control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._control.bind(str(self.folder / CONTROL))
        self._control.listen(1)
        threading.Thread(target=self._take_listeners, name="net-bridge-control", daemon=True).start()
        if who is not None:  # inside.py connects as the agent's user
            hand_over([self.folder], who)

    def _take_listeners(self) -> None:
        """The first connection only: inside.py, before the agent runs. Each socket must be a TCP
        listener on 127.0.0.1 at an allowed port, one per port; anything else is refused whole."""
        try:
            conn, _ = self._control.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            try:
                _, fds, _, _ = socket.recv_fds(conn, 1024, len(self.ports) + 1)
            except OSError:
                return
            socks = [socket.socket(fileno=fd) for fd in fds]
            try:
                bound = sorted(s.getsockname()[1] for s in socks if s.family == socket.AF_INET
                               and s.type == socket.SOCK_STREAM and s.getsockname()[0] == "127.0.0.1"
                               and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            except OSError:
                bound = []
            if bound != sorted(self.ports):
                for sock in socks:
                    sock.close()
                return
            for sock in socks:
                self.adopt(sock, sock.getsockname()[1])
            conn.sendall(ACK)
            self.handed.set()
        with contextlib.suppress(OSError):
            self._control.close()

    def netns(self) -> int | None:
        """The inode of the sandbox's network namespace (once its listeners are handed over)."""
        return netns_of(self._listeners[0]) if self._listeners and self.handed.is_set() else None

    def adopt(self, listener: socket.socket, port: int) -> None:
        """Accept on `listener`, forwarding to the host's 127.0.0.1:`port` (the tests hand their own)."""
        self._listeners.append(listener)
        threading.Thread(target=self._accept, args=(listener, port), name=f"net-bridge-{port}", daemon=True).start()

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._open >= MAX_CONNECTIONS:
                    self.refused += 1
                    conn.close()
                    continue
                self._open += 1
            self.connections[port] += 1
            relay_thread = threading.Thread(target=self._serve, args=(conn, port), daemon=True)
            # Started before it is listed: `close` joins what it lists (a thread joined before its
            # start raises, as a loaded CI run saw when a connection came in as the run ended).
            relay_thread.start()
            self._relays.append(relay_thread)

    def _serve(self, conn: socket.socket, port: int) -> None:
        live = None
        try:
            if self.wire is not None and self.wire[0] == port:
                self._gate.wait(HOLD_S)  # the model's server is being served again: wait, then go on
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                conn.close()
                return
            upstream.settimeout(None)
            tap = None
            if self.wire is not None and self.wire[0] == port:
                tap = self.wire[1].tap(self.origin(conn) if self.origin is not None else None)
            live = (conn, upstream, tap)
            with self._lock:
                self._live.setdefault(port, set()).add(live)
            try:
                relay(conn, upstream, tap)
            finally:
                if tap is not None:
                    tap.close()
        finally:
            with self._lock:
                self._open -= 1
                if live is not None:
                    self._live.get(port, set()).discard(live)

    # -- a retune (harness/serving/retune.py): the model's server served again mid-request
    def hold(self) -> None:
        """New connections to the model wait (up to HOLD_S) until `release`."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def cut(self, port: int | None = None) -> int:
        """End every connection open to the model's port now, both sides: its in-flight answer
        ends as a dropped stream (opencode sends the call again on its own), marked `cut` in the
        wire log (no turn). How many were cut."""
        port = self.wire[0] if port is None and self.wire is not None else port
        with self._lock:
            live = list(self._live.get(port, ()))
        for conn, upstream, tap in live:
            if tap is not None:
                tap.cut = True
            for sock in (upstream, conn):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        return len(live)

    def close(self, grace_s: float = 5.0) -> None:
        """Stop accepting; give the connections still open `grace_s` to finish (their last
        exchange reaches the wire log), then leave them to die with the sandbox."""
        self._gate.set()  # a connection held for a retune goes on (or fails) now
        for sock in (*self._listeners, self._control):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        deadline = time.monotonic() + grace_s
        for thread in list(self._relays):
            thread.join(max(0.0, deadline - time.monotonic()))
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class PortsOnly:
    """macOS: no namespace to forward into; the sandbox profile allows these loopback ports only."""

    ports: list[int]


@contextlib.contextmanager
def bridge(kind: str | None, ports: list[int], who: AgentIdentity | None = None,
           wire: tuple[int, WireLog] | None = None,
           origin: Callable[[socket.socket], str] | None = None) -> Iterator[Bridge | PortsOnly | None]:
    """For one sandboxed opencode run: a Bridge (bwrap), the allowed ports (sandbox-exec),
    or None (the host's network)."""
    if kind == "sandbox-exec":
        yield PortsOnly(ports)
        return
    if kind != "bwrap":
        yield None
        return
    b = Bridge(ports, who or agent_identity(), wire, origin)
    try:
        yield b
    finally:
        b.close()

