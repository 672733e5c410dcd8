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
from typing import Any
from urllib.parse import urlsplit

from harness.load.stream_connection import Result, StampedTransport, StreamConnection, error_message
from harness.wire.openai import root_url

# A pooled connection idle longer than this is closed rather than reused: servers drop idle
# keep-alive connections (uvicorn after 5 s), and one dropped as a request goes out fails it.
STALE_S = 2.0


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
        self._idle: list[StreamConnection] = []
        self._all: set[StreamConnection] = set()
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

    async def _connection(self) -> StreamConnection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and time.monotonic() - conn.idle_since <= STALE_S:
                return conn
            conn.abort()
            self._all.discard(conn)
        conn = await asyncio.wait_for(self._connect(), self.connect_timeout)
        self._all.add(conn)
        return conn

    async def _connect(self) -> StreamConnection:
        """A new connection: on a socket of our own with kernel receive stamps where the platform has
        them (Linux, plain HTTP), else on an asyncio transport stamped at data_received."""
        loop = asyncio.get_running_loop()
        if self.ssl is not None or not self.kernel_stamps or not hasattr(socket.socket, "recvmsg"):
            _, conn = await loop.create_connection(StreamConnection, self.host, self.port, ssl=self.ssl)
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
        conn = StreamConnection()
        StampedTransport(loop, sock, conn)
        return conn

    async def preconnect(self, n: int) -> int:
        """Open connections until `n` are idle in the pool (so a level's clock does not time TCP
        setup); the number opened. A failure is left to the requests to report."""
        self._prune()
        missing = n - len(self._idle)
        if missing <= 0:
            return 0
        loop = asyncio.get_running_loop()

        async def one() -> StreamConnection | None:
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

    async def send(self, request: bytes, *, keep_text: bool = False) -> Result:
        """Write a prepared request and read its response; never raises for the server's doing.
        With `keep_text`, the answer's text is kept (`Result.text`).

        A pooled connection the server closed just as the request went out (its keep-alive
        timeout or request cap; it answered nothing) is the pool's race, not the server's
        failure: the request goes once more, on a fresh connection."""
        result = await self._send(request, pooled_ok=True, keep_text=keep_text)
        if result.error == "incomplete response" and result.status is None and result.reused:
            result = await self._send(request, pooled_ok=False, keep_text=keep_text)
        return result

    async def _send(self, request: bytes, *, pooled_ok: bool, keep_text: bool) -> Result:
        result = Result(text=[] if keep_text else None)
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
            result.detail = error_message(result.body)
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


def as_messages(prompt: str | list[dict]) -> list[dict]:
    """A chat's messages: a text is one user message; a message list is itself."""
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def chat_payload(model: str, prompt: str | list[dict], max_tokens: int, *, ignore_eos: bool = True) -> dict[str, Any]:
    """The benchmark's request: one user message (or the messages given), exactly max_tokens out
    (ignore_eos), usage in the stream."""
    return {
        "model": model,
        "messages": as_messages(prompt),
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }


CHAT_PATH = "/v1/chat/completions"
