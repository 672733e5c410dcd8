"""The `replay` model server: an OpenAI-compatible streaming endpoint that plays a script.

It is a fake model for tests and demos. Every answer comes from a trajectory file
(see `harness.replay.trajectory`), so a run against it is deterministic apart from
ids and wall-clock jitter. It speaks the real wire protocol (`/v1/chat/completions`
with SSE, `/v1/models`, vLLM-named `/metrics`), so the harness drives it exactly
as it drives vLLM.

    python -m harness.replay.server --trajectory FILE --host 127.0.0.1 --port 0 \\
        --served-model-name NAME --max-model-len N [--served-log PATH]
    python -m harness.replay.server --timed --port 0 --served-model-name NAME [--ttft S --itl S ...]

The second form is the timed mode (`harness.replay.timed`): tokens on an exact
schedule, for measuring a load client's error.

Layout: `wire` reads a request and writes the wire format, `plan` turns a request into a
`Reply` (a timeline of deltas), `metrics` holds /metrics and the served log; here,
`Exchange` plays one reply against the clock, the metrics and the served log, and
`Handler` only routes and writes bytes.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from harness.errors import UserError
from harness.replay import timed
from harness.replay.metrics import Metrics, ServedLog
from harness.replay.plan import plan_reply
from harness.replay.reply import Piece, Reply
from harness.replay.trajectory import Trajectory, load_trajectory
from harness.replay.wire import (chunk, completion_body, error_body, model_card, request_problem, sse,
                                 usage_chunk)

BANNER = "replay server (scripted trajectory, not a model) listening on http://{host}:{port}"
OWNED_BY = "llms-benchmark-replay"
# How often a wait looks for a shut-down server or a client that hung up.
POLL_S = 0.05


# ---------------------------------------------------------------- playing a reply


@dataclass
class Exchange:
    """One chat request in flight: its clock, its metrics and its served-log line."""

    server: ReplayServer
    sock: socket.socket
    started: float = field(default_factory=time.time)
    clock0: float = field(default_factory=time.monotonic)
    key: int = field(default_factory=lambda: uuid.uuid4().int)

    def refuse(self, status: int, record: dict[str, Any]) -> None:
        """A request answered at once with an HTTP error: no metrics, one log line."""
        self._log({**record, "kind": "error", "status": status, "usage": None})

    def play(
        self,
        reply: Reply,
        start: Callable[[], None] = lambda: None,
        emit: Callable[[Piece], None] = lambda piece: None,
        end: Callable[[], None] = lambda: None,
    ) -> None:
        """Send the headers (`start`), emit each piece on time, then `end` the answer.

        Stops early when the server shuts down or the client hangs up; a stall always
        ends that way or by running out its time, without an answer.
        """
        # Counted as waiting before any header goes out, so /metrics never lags the client.
        self.server.metrics.arrived()
        running, completed, first_at = False, False, None
        try:
            start()
            if reply.kind == "stall":
                self.wait_until(reply.stall)
                return
            for piece in reply.pieces:
                if not self.wait_until(piece.at):
                    return
                if not running:
                    first_at = self.elapsed()
                    cached = reply.usage.cached_tokens if reply.usage else 0
                    self.server.metrics.first_token(self.key, first_at, reply.prompt_tokens, cached)
                    running = True
                emit(piece)
                self.server.metrics.generated(self.key, piece.tokens)
            if self.wait_until(reply.finish_at):
                end()
                completed = True
        except ConnectionError:
            pass  # the client hung up: recorded below as cut off, no traceback
        finally:
            self._finish(reply, running, completed, first_at)

    def wait_until(self, at: float) -> bool:
        """Wait until `at` seconds after arrival; False if the server stops or the client leaves."""
        while (remaining := at - self.elapsed()) > 0:
            if self.server.stopping.wait(min(remaining, POLL_S)) or client_gone(self.sock):
                return False
        return True

    def elapsed(self) -> float:
        return time.monotonic() - self.clock0

    def _finish(self, reply: Reply, running: bool, completed: bool, first_at: float | None = None) -> None:
        reason = (reply.finish_reason if reply.finish_reason in ("stop", "length") else "stop") if completed else "abort"
        self.server.metrics.left(self.key, running, reason, self.elapsed() if completed else None, first_at)
        self._log(
            {
                "trajectory": reply.trajectory,
                "step": reply.step,
                "kind": reply.kind,
                "status": reply.status,
                # Usage only when the whole answer (and so its usage) was served.
                "usage": reply.usage.openai() if completed and reply.usage else None,
            }
        )

    def _log(self, record: dict[str, Any]) -> None:
        base = {"trajectory": None, "step": None}
        self.server.served_log.write({**base, **record, "started": self.started, "finished": time.time()})


def client_gone(sock: socket.socket) -> bool:
    """True once the peer has closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


# ---------------------------------------------------------------- HTTP


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        trajectory: Trajectory,
        model_name: str,
        max_model_len: int,
        served_log: Path | None = None,
    ) -> None:
        super().__init__(address, Handler)
        self.trajectory = trajectory
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.metrics = Metrics(model_name, max_model_len)
        self.served_log = ServedLog(served_log)
        self.stopping = threading.Event()
        self.in_flight = 0
        self.in_flight_lock = threading.Lock()
        self.api_key: str | None = None  # set from --api-key-env: the variable's name on argv, never the key

    def models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [model_card(self.model_name, OWNED_BY, self.max_model_len,
                                                      self.trajectory.label)]}

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up is normal traffic, not a fault worth a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ReplayServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the served log is the record; per-request stderr lines are noise

    def refused_key(self, route: str) -> bool:
        """Like vLLM's --api-key: /v1 routes need `Authorization: Bearer <key>`."""
        key = self.server.api_key
        if key is None or not route.startswith("/v1"):
            return False
        if hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {key}"):
            return False
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        if self.refused_key(route):
            return
        if route == "/health":
            self.send_json(200, {"status": "ok"})
        elif route == "/v1/models":
            self.send_json(200, self.server.models_body())
        elif route == "/metrics":
            self.send_bytes(200, self.server.metrics.exposition(), CONTENT_TYPE_LATEST)
        else:
            self.send_json(404, error_body(f"no route {route}", "NotFoundError", 404))

    def do_POST(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        if self.refused_key(route):
            return
        if route != "/v1/chat/completions":
            self.send_json(404, error_body(f"no route {route}", "NotFoundError", 404))
            return
        with self.server.in_flight_lock:
            self.server.in_flight += 1
        try:
            self.chat()
        finally:
            with self.server.in_flight_lock:
                self.server.in_flight -= 1

    def chat(self) -> None:
        exchange = Exchange(self.server, self.connection)
        try:
            body = json.loads(self.read_body() or b"null")
        except (ValueError, UnicodeDecodeError):
            body = None
        problem = request_problem(body, self.server.model_name)
        if problem is not None:
            status, message, type_ = problem
            exchange.refuse(status, {})
            self.send_json(status, error_body(message, type_, status))
            return
        reply = plan_reply(self.server.trajectory, body)
        if reply.kind == "error":
            exchange.refuse(reply.status, {"trajectory": reply.trajectory, "step": reply.step})
            self.send_json(reply.status, reply.error)
        elif body.get("stream"):
            self.stream(exchange, reply, body)
        else:
            self.respond_whole(exchange, reply)

    def stream(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), self.server.model_name
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def end() -> None:
            self.write(sse(chunk(cid, created, model, {}, reply.finish_reason)))
            if include_usage and reply.usage:
                self.write(sse(usage_chunk(cid, created, model, reply.usage)))
            self.write(sse("[DONE]"))

        exchange.play(
            reply,
            start=lambda: self.start_open_ended("text/event-stream"),
            emit=lambda piece: self.write(sse(chunk(cid, created, model, piece.delta))),
            end=end,
        )

    def respond_whole(self, exchange: Exchange, reply: Reply) -> None:
        if reply.kind == "stall":
            exchange.play(reply, start=lambda: self.start_open_ended("application/json"))
            return
        cid, model = f"chatcmpl-{uuid.uuid4().hex}", self.server.model_name
        exchange.play(reply, end=lambda: self.send_json(200, completion_body(reply, cid, int(time.time()), model)))

    # -- bytes on the wire

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def read_chunked(self) -> bytes:
        data = b""
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            data += self.rfile.read(size)
            self.rfile.readline()
        while self.rfile.readline().strip():  # trailers
            pass
        return data

    def start_open_ended(self, content_type: str) -> None:
        """Headers for a body of unknown length: it ends when the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.flush()

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, status: int, payload: Any) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json")

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        """A whole response; a ConnectionError propagates (the server's handle_error drops it)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.write(data)


# ---------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.replay.server",
        description="Serve a scripted trajectory over the OpenAI chat API (a fake model for tests and demos).",
    )
    parser.add_argument("--trajectory", type=Path, help="trajectory YAML file (required unless --timed)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--served-model-name", required=True, help="the only model name accepted")
    parser.add_argument("--max-model-len", type=int, help="reported by /v1/models (required unless --timed)")
    parser.add_argument("--served-log", type=Path, help="append one JSON line per chat request here")
    parser.add_argument("--api-key-env", help="require `Bearer <key>` on /v1, the key read from this variable")
    timed.add_arguments(parser)
    args = parser.parse_args(argv)
    if not args.timed and (args.trajectory is None or args.max_model_len is None):
        parser.error("--trajectory and --max-model-len are required (or --timed for the exact-schedule mode)")
    if args.timed and args.max_model_len is None:
        args.max_model_len = 131_072
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.timed:
        return timed.main(args)
    try:
        trajectory = load_trajectory(args.trajectory)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return UserError.exit_code
    address = (args.host, args.port)
    if args.api_key_env and not os.environ.get(args.api_key_env):
        print(f"--api-key-env: ${args.api_key_env} is not set", file=sys.stderr)
        return UserError.exit_code
    server = ReplayServer(address, trajectory, args.served_model_name, args.max_model_len, args.served_log)
    server.api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    print(BANNER.format(host=args.host, port=server.server_address[1]), flush=True)
    while not stop.wait(0.5):
        pass
    shut_down(server)
    return 0


def shut_down(server: ReplayServer, grace_s: float = 2.0) -> None:
    """Stop accepting, end stalls and streams, let them write their log lines, then close."""
    server.stopping.set()
    server.shutdown()
    deadline = time.monotonic() + grace_s
    while server.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    server.server_close()
    server.served_log.close()


if __name__ == "__main__":
    sys.exit(main())
