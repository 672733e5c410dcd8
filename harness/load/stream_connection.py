"""One keep-alive HTTP/1.1 connection of the streaming client (harness/load/client.py has
the definitions it measures by): the response parser that stamps each token chunk (its SSE
line read by harness/wire/sse.py) with its arrival, and the socket that reads with the
kernel's receive time. `Result` is what one request measured."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field

from harness.kernel_stamps import StampedSocket, receive_age_ns
from harness.wire import sse

HEAD_END = b"\r\n\r\n"
FAST_CONTENT = b'"content":"'
FAST_TEXT = b'"text":"'
MAX_ERROR_BODY = 2000


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
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where the server reports it
    # The answer's text pieces (content, then text), kept only when the caller asks (StreamClient.send
    # keep_text): every chunk is then decoded, off the compact fast path
    text: list[str] | None = None
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


class StreamConnection(asyncio.Protocol):
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
        self._sse = sse.Decoder()
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
        self._buf = b""
        self._sse = sse.Decoder()
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
        for payload in self._sse.feed(data):
            self._event(payload, now)
            if self._result is None:
                return  # [DONE] on a connection that closes: the rest of the read belongs to no request

    def _event(self, payload: bytes, now: int) -> None:
        result = self._result
        if payload == sse.DONE_BYTES:
            self._sse_done = True
            result.end_ns = now
            if self._mode == "close":
                self._finish(now, keep=False)
            return
        if b'"usage"' not in payload and b'"error"' not in payload and result.text is None:
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
            details = u.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                result.cached_tokens = details["cached_tokens"]
        token = False
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    or delta.get("tool_calls") or choice.get("text")):
                token = True
            if result.text is not None:
                piece = delta.get("content") or choice.get("text")
                if isinstance(piece, str):
                    result.text.append(piece)
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        if token:
            result.token_ns.append(now)


class StampedTransport(StampedSocket):
    """The kernel's receive time on every read (harness/kernel_stamps.py) rather than the
    moment the loop got round to it: with many streams, a burst of chunks is read one socket
    after another, and each would otherwise be stamped later than the one before. Quacks
    enough like a transport for `StreamConnection`."""

    read_size = 1 << 18

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: StreamConnection) -> None:
        super().__init__(loop, sock)
        self.protocol = protocol
        protocol.connection_made(self)  # type: ignore[arg-type]
        self.start_reading()

    def received(self, data: bytes, ancillary: list) -> None:
        self.protocol.data_arrived(data, arrival_ns(ancillary))

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


def arrival_ns(ancillary: list) -> int:
    """The kernel's receive time of a read, on the perf_counter clock; now if it gave none."""
    now = time.perf_counter_ns()
    age = receive_age_ns(ancillary)
    return now if age is None else now - age


def error_message(body: bytes) -> str:
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
