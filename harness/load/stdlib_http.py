"""A small HTTP/1.1 client on asyncio streams and `ssl`, standard library only: what the
classroom's students need to run where nothing but Python is installed (seed 002: "the
simulator needs only Python, so it runs in a stock container").

The part of httpx's AsyncClient the students use: `stream(method, url, json=, headers=)` as an
async context manager whose response has `status_code`, `headers.get()`, `aread()` and
`aiter_bytes()` (its events read by harness/wire/sse.py); `get(url, headers=)` for one small body. Bodies framed by Content-Length,
chunked transfer coding or the connection's end; keep-alive connections reused per host (a
pooled one the server closed meanwhile is retried once on a fresh one). Every failure is one
HTTPError, as httpx's are.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024


class HTTPError(Exception):
    """Connecting, sending or reading failed (the name of the failure first, as httpx's are)."""


class Headers:
    """Response headers, read case-insensitively (the last value of a repeated name)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._items = {k.lower(): v for k, v in pairs}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._items.get(name.lower(), default)


class Response:
    def __init__(self, status: int, headers: Headers, reader: asyncio.StreamReader, read_timeout: float,
                 method: str) -> None:
        self.status_code, self.headers, self._reader, self._timeout = status, headers, reader, read_timeout
        length = headers.get("content-length")
        self._chunked = "chunked" in (headers.get("transfer-encoding") or "").lower()
        self._left = int(length) if length is not None and length.strip().isdigit() and not self._chunked else None
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._left = 0
        self.complete = False  # the whole body was read (the connection may be reused)

    async def _read(self, coro):
        try:
            return await asyncio.wait_for(coro, self._timeout)
        except TimeoutError:
            raise HTTPError(f"ReadTimeout: no data for {self._timeout:g}s") from None
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError) as exc:
            raise HTTPError(f"ReadError: {type(exc).__name__}: {exc}") from None

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._chunked:
            while True:
                size_line = await self._read(self._reader.readline())
                if not size_line:
                    raise HTTPError("RemoteProtocolError: the connection closed inside a chunked body")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise HTTPError(f"RemoteProtocolError: bad chunk size {size_line[:40]!r}") from None
                if size == 0:
                    while (await self._read(self._reader.readline())) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                data = await self._read(self._reader.readexactly(size))
                await self._read(self._reader.readexactly(2))  # CRLF
                yield data
        elif self._left is not None:
            while self._left > 0:
                data = await self._read(self._reader.read(min(self._left, 65536)))
                if not data:
                    raise HTTPError("RemoteProtocolError: the connection closed before the body's end")
                self._left -= len(data)
                yield data
        else:  # delimited by the connection's end
            while data := await self._read(self._reader.read(65536)):
                yield data
        self.complete = True

    async def aread(self) -> bytes:
        return b"".join([part async for part in self.aiter_bytes()])

    def json(self) -> Any:
        raise TypeError("read the body with aread() first")


class _Read:
    """What `get` returns: the status, the headers and the whole body."""

    def __init__(self, status_code: int, headers: Headers, body: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class AsyncClient:
    def __init__(self, *, verify: ssl.SSLContext | bool = True, connect_timeout: float = 10.0,
                 read_timeout: float = 600.0) -> None:
        self.verify, self.connect_timeout, self.read_timeout = verify, connect_timeout, read_timeout
        self._idle: dict[tuple[str, str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()

    def _ssl(self, scheme: str) -> ssl.SSLContext | None:
        if scheme != "https":
            return None
        if isinstance(self.verify, ssl.SSLContext):
            return self.verify
        if self.verify is False:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            return ctx
        return ssl.create_default_context()

    async def _connect(self, key: tuple[str, str, int]):
        scheme, host, port = key
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=self._ssl(scheme), server_hostname=host if scheme == "https"
                                        else None, limit=MAX_HEAD * 16), self.connect_timeout)
        except TimeoutError:
            raise HTTPError(f"ConnectTimeout: {host}:{port} did not answer in {self.connect_timeout:g}s") from None
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise HTTPError(f"ConnectError: {exc}") from None
        except OSError as exc:
            raise HTTPError(f"ConnectError: {exc}") from None

    @asynccontextmanager
    async def stream(self, method: str, url: str, *, json: Any = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[Response]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HTTPError(f"UnsupportedProtocol: {url!r}")
        key = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        body = b"" if json is None else jsonlib.dumps(json).encode()
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        lines = [f"{method} {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1", f"Host: {host}",
                 "Accept: */*", "Accept-Encoding: identity", "Connection: keep-alive",
                 f"Content-Length: {len(body)}"]
        if json is not None:
            lines.append("Content-Type: application/json")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (1, 2):
            pooled = bool(self._idle.get(key))
            reader, writer = self._idle[key].pop() if pooled else await self._connect(key)
            try:
                writer.write(request)
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout)
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                writer.close()
                if pooled and attempt == 1:
                    continue  # the server closed the idle connection meanwhile: once more, fresh
                raise HTTPError(f"RemoteProtocolError: {type(exc).__name__}: {exc}") from None
            except TimeoutError:
                writer.close()
                raise HTTPError(f"ReadTimeout: no response head in {self.read_timeout:g}s") from None
            except asyncio.LimitOverrunError:
                writer.close()
                raise HTTPError("RemoteProtocolError: the response head is too long") from None
            break
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            writer.close()
            raise HTTPError(f"RemoteProtocolError: bad status line {status_line[:80]!r}") from None
        pairs = [(k.strip(), v.strip()) for k, v in (h.split(":", 1) for h in header_lines if ":" in h)]
        response = Response(status, Headers(pairs), reader, self.read_timeout, method)
        try:
            yield response
        finally:
            reusable = (response.complete and (response._chunked or response._left is not None)
                        and (response.headers.get("connection") or "").lower() != "close")
            if reusable:
                self._idle.setdefault(key, []).append((reader, writer))
            else:
                writer.close()

    async def get(self, url: str, *, headers: dict[str, str] | None = None) -> _Read:
        async with self.stream("GET", url, headers=headers) as resp:
            return _Read(resp.status_code, resp.headers, await resp.aread())
