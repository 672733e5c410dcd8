"""The telemetry store process: an OTLP/HTTP receiver that writes traces, metrics, logs
and CPU profiles into one DuckDB file, and answers read-only SQL over HTTP.

    python -m harness.telemetry.receiver --db PATH [--host 127.0.0.1] [--port 4318]
                                         [--query-port PORT] [--counters PATH]

Prints one line `telemetry store listening on http://HOST:PORT` once it accepts
connections (with --query-port, then `query endpoint on http://HOST:PORT`), and runs
until SIGTERM/SIGINT (exit 0, queue drained, DB closed).

Who may write the evidence: when the environment variable TELEMETRY_INGEST_TOKEN is set
(the mission's setup sets it for this process and gives it to the services it observes,
never to the agent), an OTLP POST must carry `Authorization: Bearer <token>`; without it
the answer is 401 and nothing is stored. The query endpoint (--query-port) answers
`/query`, `/health` and `/stats` only: the agent's `obs` talks to it.

DuckDB allows a single writing process, so this process is the only one that opens the
file; everything else reads through `POST /query`. Requests are decoded on the HTTP
threads and handed to one writer thread through a bounded queue: a full queue blocks
the request (backpressure), nothing is ever dropped.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format

from harness.telemetry.otlp import SIGNALS, Signal, decode_otlp, profile_rows
from harness.telemetry.readonly import BadRequest, jsonable
from harness.telemetry.store import ShuttingDown, Store

MAX_BODY = 64 * 1024 * 1024  # bytes, after decompression
DEFAULT_LIMIT = 1000
MAX_LIMIT = 200_000


class BodyRefused(BadRequest):
    """A body not read at all, or not inflated past the limit (400 or 413); the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def to_json(doc: Any) -> bytes:
    try:
        text = json.dumps(doc, default=jsonable, allow_nan=False)
    except ValueError:  # NaN / inf are not JSON: send null
        text = json.dumps(_finite(doc), default=jsonable, allow_nan=False)
    return text.encode()


# -- HTTP -------------------------------------------------------------------------------
def _inflate(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate", "x-gzip"):
        raise BadRequest(f"unsupported Content-Encoding {encoding!r}")
    # wbits 47: gzip or zlib headers; -15: raw deflate, as some clients send. max_length
    # bounds either one: a zip bomb stops at MAX_BODY + 1 bytes and is refused.
    for wbits in (47, -15):
        try:
            out = zlib.decompressobj(wbits=wbits).decompress(body, MAX_BODY + 1)
            break
        except zlib.error as exc:
            error = exc
    else:
        raise BadRequest(f"cannot decompress {encoding} body: {error}")
    if len(out) > MAX_BODY:
        raise BodyRefused(413, f"body over {MAX_BODY} bytes once decompressed")
    return out


INGEST_TOKEN_ENV = "TELEMETRY_INGEST_TOKEN"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the exporters reuse their connection
    server_version = "telemetry-store/1"
    store: Store  # set on the subclass made by make_server
    ingest_token: str | None = None  # OTLP POSTs need it as a bearer token, when set
    ingest: bool = True  # False: the query-only endpoint, which stores nothing

    def _may_ingest(self) -> str | None:
        """Why this OTLP POST may not write (None: it may)."""
        if not self.ingest:
            return "this endpoint answers queries only; the services write through the ingest endpoint"
        if self.ingest_token is None:
            return None
        sent = self.headers.get("Authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {self.ingest_token}".encode()):
            return None
        return "ingest needs the services' token (Authorization: Bearer ...)"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by design
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, doc: Any) -> None:
        self._send(status, to_json(doc), "application/json")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked()
        else:
            text = (self.headers.get("Content-Length") or "0").strip()
            # A negative length would make rfile.read() wait for the client to close.
            if not text.isdigit():
                raise BodyRefused(400, f"Content-Length {text!r} is not a non-negative integer")
            length = int(text)
            if length > MAX_BODY:
                raise BodyRefused(413, f"Content-Length {length} is over {MAX_BODY} bytes")
            body = self.rfile.read(length)
        return _inflate(body, self.headers.get("Content-Encoding", ""))

    def _read_chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            field = self.rfile.readline(64).split(b";")[0].strip() or b"0"
            try:
                size = int(field, 16)
            except ValueError:
                size = -1
            if size < 0 or field.startswith((b"-", b"+")):
                raise BodyRefused(400, f"bad chunk size {field[:20]!r}")
            if size == 0:
                self.rfile.readline(64)
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise BodyRefused(413, f"chunked body over {MAX_BODY} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(64)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/stats":
            self._send_json(200, self.store.stats())
        else:
            self._send_json(404, {"error": f"no route GET {path}"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path in SIGNALS or path == "/v1/profiles":
            refused = self._may_ingest()
            if refused is not None:  # before the body is read: close, so it is never taken for a request
                self.close_connection = True
                self._send_json(401, {"error": refused})
                return
        try:
            body = self._read_body()
            if path in SIGNALS:
                self._otlp(SIGNALS[path], body)
            elif path == "/v1/profiles":
                self._profiles(body)
            elif path == "/query":
                self._query(body)
            else:
                self._send_json(404, {"error": f"no route POST {path}"})
        except BadRequest as exc:
            if path in SIGNALS or path == "/v1/profiles":
                self.store.reject()
            if isinstance(exc, BodyRefused):
                self.close_connection = True  # the rest of that body must not be read as a request
            self._send_json(getattr(exc, "status", 400), {"error": str(exc)})
        except ShuttingDown as exc:
            self._send_json(503, {"error": str(exc)})
        except Exception as exc:  # a bug of ours: answer, count, and keep serving
            if path in SIGNALS or path == "/v1/profiles":
                self.store.reject()
            self._send_json(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _is_json(self) -> bool:
        return "json" in self.headers.get("Content-Type", "").lower()

    def _otlp(self, sig: Signal, body: bytes) -> None:
        is_json = self._is_json()
        rows = sig.to_rows(decode_otlp(sig, body, is_json))
        self.store.submit(sig.table, rows)
        if is_json:
            self._send(200, json_format.MessageToJson(sig.response()).encode(), "application/json")
        else:
            self._send(200, sig.response().SerializeToString(), "application/x-protobuf")

    def _profiles(self, body: bytes) -> None:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise BadRequest(f"profile is not JSON: {exc}") from exc
        rows = profile_rows(doc)
        self.store.submit("profiles", rows)
        self._send_json(200, {"accepted": len(rows)})

    def _query(self, body: bytes) -> None:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise BadRequest(f"query is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise BadRequest('send {"sql": "SELECT ...", "limit": N}')
        limit = doc.get("limit", DEFAULT_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise BadRequest("'limit' must be a non-negative integer")
        self._send_json(200, self.store.query(doc.get("sql"), min(limit, MAX_LIMIT)))


class Server(ThreadingHTTPServer):
    """Tracks open connections so that stopping can close idle keep-alive ones: a
    handler thread left blocked on its socket would outlive the store."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._open: set = set()
        self._open_lock = threading.Lock()

    def process_request_thread(self, request, client_address) -> None:
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def close_connections(self, timeout_s: float = 10.0) -> None:
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RD)  # idle ones see EOF; busy ones can still answer
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        while self._open and time.monotonic() < deadline:
            time.sleep(0.02)


def make_server(store: Store, host: str, port: int, ingest_token: str | None = None, ingest: bool = True) -> Server:
    handler = type("BoundHandler", (Handler,), {"store": store, "ingest_token": ingest_token, "ingest": ingest})
    return Server((host, port), handler)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m harness.telemetry.receiver", description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True, help="DuckDB file (created if missing)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4318, help="0 picks a free port")
    p.add_argument("--query-port", type=int, default=None,
                   help="also serve a query-only endpoint (no ingest) on this port; 0 picks a free port")
    p.add_argument("--counters", help="write the received/dropped/rejected counters here (JSON)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    token = os.environ.pop(INGEST_TOKEN_ENV, None) or None  # read once, kept out of any child's reach
    store = Store(args.db, args.counters)
    servers = [make_server(store, args.host, args.port, ingest_token=token)]
    if args.query_port is not None:
        servers.append(make_server(store, args.host, args.query_port, ingest=False))
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print(f"telemetry store listening on http://{args.host}:{servers[0].server_address[1]}", flush=True)
    if len(servers) > 1:
        print(f"query endpoint on http://{args.host}:{servers[1].server_address[1]}", flush=True)
    while not stop.wait(0.5):  # wake now and then so the signal handler gets to run
        pass
    for server in servers:
        server.shutdown()
        server.server_close()
        server.close_connections()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
