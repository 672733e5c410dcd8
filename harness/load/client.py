"""A lean streaming client for OpenAI-compatible servers: one request, its exact timings.

Built on asyncio, not a general HTTP library, so the time of a chunk is the moment
its bytes reached this host: on Linux over plain HTTP, the kernel's receive time of
each read (SO_TIMESTAMPNS) on the `time.perf_counter_ns()` clock, so a chunk read late
because the loop was busy with other streams still carries its arrival; elsewhere
(TLS, other systems) `perf_counter_ns()` in `data_received`, before any parsing.
(Chunks that pile up in a socket while this process gets no CPU are read together
and carry the arrival of the last of them: a client starved for whole inter-token
gaps cannot do better.)
Nothing else runs per chunk: HTTP/1.1
framing and SSE lines are split with bytes operations, and a data line is decoded
with `json` only when the compact fast path cannot classify it (usage, errors,
reasoning-only or unusual spacing). Connections are kept alive and pooled, with
no limit but the caller's concurrency.

Definitions (what the load benchmark and the probe report):

- start: just before the request is written (a pooled connection, or the connect
  when there is none, is included);
- a token chunk: an SSE event whose choice carries non-empty `content`,
  `reasoning_content`, `reasoning`, `tool_calls` or (text completions) `text`;
  the role-only first chunk of a chat stream is not one;
- TTFT: start to the first token chunk; ITL: the gaps between successive token
  chunks; TPOT: (last token chunk - first) / (completion tokens - 1);
- end-to-end: start to `data: [DONE]` (or the end of the body);
- tokens: the server's `usage` (`stream_options.include_usage`), never counted here.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.kernel_stamps import StampedSocket, receive_age_ns
from harness.wire.openai import root_url

HEAD_END = b"\r\n\r\n"
FAST_CONTENT = b'"content":"'
FAST_TEXT = b'"text":"'
MAX_ERROR_BODY = 2000
# A pooled connection idle longer than this is closed rather than reused: servers drop idle
# keep-alive connections (uvicorn after 5 s), and one dropped as a request goes out fails it.
STALE_S = 2.0


@dataclass(slots=True)
class Result:
    """One request as the client saw it. Times are perf_counter_ns values."""

    ok: bool = False
    error: str | None = None  # a short type for counting: "HTTP 404", "timeout", "ConnectionRefusedError", ...
    detail: str | None = None  # what the server or the exception said
    status: int | None = None
    start_ns: int = 0
    end_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)  # arrival of every token chunk
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    body: bytes = b""  # a non-streamed body (JSON responses, errors)
    reused: bool = False  # sent on a pooled keep-alive connection

    @property
    def ttft_s(self) -> float | None:
        return (self.token_ns[0] - self.start_ns) / 1e9 if self.token_ns else None

    @property
    def e2e_s(self) -> float | None:
        return (self.end_ns - self.start_ns) / 1e9 if self.end_ns is not None else None

    @property
    def chunks(self) -> int:
        return len(self.token_ns)

    def itl_s(self) -> list[float]:
        t = self.token_ns
        return [(t[i] - t[i - 1]) / 1e9 for i in range(1, len(t))]

    @property
    def tpot_s(self) -> float | None:
        n = self.completion_tokens or self.chunks
        if n < 2 or len(self.token_ns) < 2:
            return None
        return (self.token_ns[-1] - self.token_ns[0]) / 1e9 / (n - 1)


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, parsing one response at a time as bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self.idle_since = 0.0
        self.last_ns = 0
        self._result: Result | None = None
        self._done: asyncio.Future | None = None
        self._buf = b""
        self._sse = b""
        self._mode = "idle"  # idle | head | chunk-size | chunk-data | chunk-end | trailer | length | close
        self._left = 0
        self._event_stream = False
        self._keep_alive = True
        self._sse_done = False

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data_arrived(data, time.perf_counter_ns())

    def data_arrived(self, data: bytes, now: int) -> None:
        """`data` reached this host at `now` (perf_counter_ns)."""
        self.last_ns = now
        if self._result is None:
            return  # bytes with no request in flight: ignore (the connection is not reused)
        try:
            self._feed(data, now)
        except Exception as exc:  # malformed framing or JSON: the request fails, never the loop
            self._finish(now, error="protocol error", detail=f"{type(exc).__name__}: {exc}", keep=False)

    def eof_received(self) -> bool:
        self._closed_now()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed_now(exc)

    # -- one request

    def begin(self, result: Result, request: bytes) -> asyncio.Future:
        self._result = result
        self._done = asyncio.get_running_loop().create_future()
        self._buf = self._sse = b""
        self._mode = "head"
        self._sse_done = False
        self.reusable = False
        self.last_ns = time.perf_counter_ns()
        self.transport.write(request)
        return self._done

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _closed_now(self, exc: Exception | None = None) -> None:
        self.closed = True
        if self._result is None:
            return
        now = time.perf_counter_ns()
        if self._mode == "close" or self._sse_done:
            self._finish(now, keep=False)  # a body delimited by the connection's end
        else:
            name = type(exc).__name__ if exc else "ConnectionClosed"
            self._finish(now, error="incomplete response", detail=f"{name}: the server closed the connection "
                         f"before the response ended", keep=False)

    def _finish(self, now: int, *, error: str | None = None, detail: str | None = None, keep: bool = True) -> None:
        result, done = self._result, self._done
        if result is None:
            return
        self._result = None
        self._mode = "idle"
        if result.end_ns is None:
            result.end_ns = now
        if error and not result.error:
            result.error, result.detail = error, detail
        self.reusable = keep and self._keep_alive and not self.closed
        if done is not None and not done.done():
            done.set_result(None)

    # -- HTTP framing

    def _feed(self, data: bytes, now: int) -> None:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        while buf and self._result is not None:
            mode = self._mode
            if mode == "head":
                end = buf.find(HEAD_END)
                if end < 0:
                    self._buf = buf
                    return
                self._head(buf[:end].decode("latin-1"))
                buf = buf[end + 4:]
                if self._mode == "length" and self._left == 0:
                    self._body(b"", now)
                    self._finish(now)
                    return
            elif mode == "chunk-size":
                end = buf.find(b"\r\n")
                if end < 0:
                    self._buf = buf
                    return
                self._left = int(buf[:end].split(b";", 1)[0].strip() or b"0", 16)
                buf = buf[end + 2:]
                self._mode = "chunk-data" if self._left else "trailer"
            elif mode == "chunk-data":
                piece = buf[: self._left]
                buf = buf[self._left:]
                self._left -= len(piece)
                self._body(piece, now)
                if self._left == 0:
                    self._mode = "chunk-end"
            elif mode == "chunk-end":
                if len(buf) < 2:
                    self._buf = buf
                    return
                buf = buf[2:]
                self._mode = "chunk-size"
            elif mode == "trailer":
                end = buf.find(b"\r\n")
                if end < 0:
                    self._buf = buf
                    return
                line, buf = buf[:end], buf[end + 2:]
                if not line:
                    self._finish(now)
                    return
            elif mode == "length":
                piece = buf[: self._left]
                buf = buf[self._left:]
                self._left -= len(piece)
                self._body(piece, now)
                if self._left == 0:
                    self._finish(now)
                    return
            elif mode == "close":
                self._body(buf, now)
                return
            else:
                return

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        result = self._result
        result.status = int(status)
        connection = headers.get("connection", "").lower()
        self._keep_alive = version == "HTTP/1.1" and connection != "close" or connection == "keep-alive"
        self._event_stream = headers.get("content-type", "").startswith("text/event-stream")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunk-size"
        elif "content-length" in headers:
            self._mode, self._left = "length", int(headers["content-length"])
        else:
            self._mode, self._keep_alive = "close", False

    # -- the body: SSE events, or a whole body

    def _body(self, data: bytes, now: int) -> None:
        result = self._result
        if not self._event_stream or result.status != 200:
            if len(result.body) < 1 << 22:
                result.body += data
            return
        buf = self._sse + data if self._sse else data
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = buf[start:end]
            start = end + 1
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), now)
                if self._result is None:
                    return
        self._sse = buf[start:]

    def _event(self, payload: bytes, now: int) -> None:
        result = self._result
        if payload == b"[DONE]":
            self._sse_done = True
            result.end_ns = now
            if self._mode == "close":
                self._finish(now, keep=False)
            return
        if b'"usage"' not in payload and b'"error"' not in payload:
            at = payload.find(FAST_CONTENT)
            if at < 0:
                at = payload.find(FAST_TEXT)
                skip = len(FAST_TEXT)
            else:
                skip = len(FAST_CONTENT)
            if at >= 0 and payload[at + skip: at + skip + 1] not in (b'"', b""):
                result.token_ns.append(now)
                if b'"finish_reason":"' in payload:
                    self._finish_reason(payload)
                return
        self._slow_event(payload, now)

    def _finish_reason(self, payload: bytes) -> None:
        for choice in json.loads(payload).get("choices") or []:
            if choice.get("finish_reason"):
                self._result.finish_reason = choice["finish_reason"]

    def _slow_event(self, payload: bytes, now: int) -> None:
        result = self._result
        try:
            event = json.loads(payload)
        except ValueError:
            return  # a comment or keep-alive that is not JSON
        if not isinstance(event, dict):
            return
        if event.get("error") and not event.get("choices"):
            err = event["error"]
            result.error = "stream error"
            result.detail = (err.get("message") if isinstance(err, dict) else str(err))[:MAX_ERROR_BODY]
        if isinstance(event.get("usage"), dict):
            u = event["usage"]
            result.prompt_tokens = u.get("prompt_tokens", result.prompt_tokens)
            result.completion_tokens = u.get("completion_tokens", result.completion_tokens)
        token = False
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    or delta.get("tool_calls") or choice.get("text")):
                token = True
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        if token:
            result.token_ns.append(now)


class _StampedSocket(StampedSocket):
    """The kernel's receive time on every read (harness/kernel_stamps.py) rather than the
    moment the loop got round to it: with many streams, a burst of chunks is read one socket
    after another, and each would otherwise be stamped later than the one before. Quacks
    enough like a transport for `_Connection`."""

    read_size = 1 << 18

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: _Connection) -> None:
        super().__init__(loop, sock)
        self.protocol = protocol
        protocol.connection_made(self)  # type: ignore[arg-type]
        self.start_reading()

    def received(self, data: bytes, ancillary: list) -> None:
        self.protocol.data_arrived(data, _arrival_ns(ancillary))

    def at_eof(self) -> None:
        self.protocol.eof_received()
        self._lost(None)

    def broken(self, exc: OSError) -> None:
        self._lost(exc)

    def abort(self) -> None:
        self._lost(None, notify=False)

    def _lost(self, exc: Exception | None, notify: bool = True) -> None:
        if self.closed:
            return
        self.close()
        if notify:
            self.protocol.connection_lost(exc)


def _arrival_ns(ancillary: list) -> int:
    """The kernel's receive time of a read, on the perf_counter clock; now if it gave none."""
    now = time.perf_counter_ns()
    age = receive_age_ns(ancillary)
    return now if age is None else now - age


class StreamClient:
    """Pooled keep-alive connections to one server; `stream()` one request at a time per caller."""

    def __init__(self, base_url: str, *, api_key: str | None = None, connect_timeout: float = 10.0,
                 idle_timeout: float = 900.0, kernel_stamps: bool = True) -> None:
        root = root_url(base_url)
        parts = urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url}")
        self.root = root
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        host_header = parts.netloc.rsplit("@", 1)[-1]
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = f"Host: {host_header}\r\nUser-Agent: llms-benchmark\r\n{auth}"
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._address: tuple | None = None
        self.kernel_stamps = kernel_stamps

    def request_bytes(self, method: str, path: str, body: bytes | None = None) -> bytes:
        lines = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._head}"
        if body is not None:
            lines += f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
        return (lines + "\r\n").encode() + (body or b"")

    def _prune(self) -> None:
        """Close and forget pooled connections the server closed or may be about to."""
        now = time.monotonic()
        keep = []
        for conn in self._idle:
            if conn.closed or now - conn.idle_since > STALE_S:
                conn.abort()
                self._all.discard(conn)
            else:
                keep.append(conn)
        self._idle = keep

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and time.monotonic() - conn.idle_since <= STALE_S:
                return conn
            conn.abort()
            self._all.discard(conn)
        conn = await asyncio.wait_for(self._connect(), self.connect_timeout)
        self._all.add(conn)
        return conn

    async def _connect(self) -> _Connection:
        """A new connection: on a socket of our own with kernel receive stamps where the platform has
        them (Linux, plain HTTP), else on an asyncio transport stamped at data_received."""
        loop = asyncio.get_running_loop()
        if self.ssl is not None or not self.kernel_stamps or not hasattr(socket.socket, "recvmsg"):
            _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
            return conn
        if self._address is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._address = infos[0][0], infos[0][4]
        family, address = self._address
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        conn = _Connection()
        _StampedSocket(loop, sock, conn)
        return conn

    async def preconnect(self, n: int) -> int:
        """Open connections until `n` are idle in the pool (so a level's clock does not time TCP
        setup); the number opened. A failure is left to the requests to report."""
        self._prune()
        missing = n - len(self._idle)
        if missing <= 0:
            return 0
        loop = asyncio.get_running_loop()

        async def one() -> _Connection | None:
            try:
                return await asyncio.wait_for(self._connect(), self.connect_timeout)
            except (OSError, asyncio.TimeoutError):
                return None

        opened = [c for c in await asyncio.gather(*(one() for _ in range(missing))) if c is not None]
        for conn in opened:
            conn.idle_since = time.monotonic()
        self._all.update(opened)
        self._idle.extend(opened)
        return len(opened)

    async def send(self, request: bytes) -> Result:
        """Write a prepared request and read its response; never raises for the server's doing.

        A pooled connection the server closed just as the request went out (its keep-alive
        timeout or request cap; it answered nothing) is the pool's race, not the server's
        failure: the request goes once more, on a fresh connection."""
        result = await self._send(request, pooled_ok=True)
        if result.error == "incomplete response" and result.status is None and result.reused:
            result = await self._send(request, pooled_ok=False)
        return result

    async def _send(self, request: bytes, *, pooled_ok: bool) -> Result:
        result = Result()
        result.start_ns = time.perf_counter_ns()
        try:
            if not pooled_ok:
                for idle in self._idle:
                    idle.abort()
                    self._all.discard(idle)
                self._idle = []
            pooled = set(self._idle)
            conn = await self._connection()
            result.reused = conn in pooled
        except (OSError, asyncio.TimeoutError) as exc:
            result.end_ns = time.perf_counter_ns()
            result.error = "timeout" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
            result.detail = f"connecting to {self.host}:{self.port}: {exc or 'timed out'}"
            return result
        done = conn.begin(result, request)
        idle_ns = int(self.idle_timeout * 1e9)
        while not done.done():
            await asyncio.wait((done,), timeout=self.idle_timeout)
            if not done.done() and time.perf_counter_ns() - conn.last_ns >= idle_ns:
                conn.abort()
                result.error = "timeout"
                result.detail = f"nothing received for {self.idle_timeout:g} s"
                if not done.done():
                    done.set_result(None)
        if result.end_ns is None:
            result.end_ns = time.perf_counter_ns()
        if conn.reusable and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.abort()
            self._all.discard(conn)
        self._judge(result)
        return result

    @staticmethod
    def _judge(result: Result) -> None:
        if result.status is not None and result.status != 200 and not result.error:
            result.error = f"HTTP {result.status}"
            result.detail = _error_message(result.body)
        if result.error:
            result.ok = False
            return
        result.ok = True

    async def stream(self, path: str, payload: dict[str, Any]) -> Result:
        """POST a streamed completion; ok only if at least one token chunk arrived."""
        result = await self.send(self.request_bytes("POST", path, json.dumps(payload).encode()))
        if result.ok and not result.token_ns:
            result.ok, result.error = False, "no output tokens received"
        return result

    async def get(self, path: str) -> Result:
        return await self.send(self.request_bytes("GET", path))

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        self._idle.clear()


def chat_payload(model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True) -> dict[str, Any]:
    """The benchmark's request: one user message, exactly max_tokens out (ignore_eos), usage in the stream."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }


CHAT_PATH = "/v1/chat/completions"


def _error_message(body: bytes) -> str:
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
    try:
        err = json.loads(body).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:MAX_ERROR_BODY]
        if isinstance(err, str):
            return err
    except (ValueError, AttributeError):
        pass
    return text.strip()
