"""Server-sent events as an OpenAI-compatible server streams a completion, decoded in one
place: bytes in, the payload of each `data:` line out (`[DONE]` included: the reader
decides what the end means to it). Lines end at LF (a CR before it is dropped with the
payload's surrounding whitespace); a line longer than `line_cap` is dropped whole, so a
stream without newlines holds at most that much.

Standard library only, and ours rather than httpx-sse, because of who reads the stream:
- the classroom student runs from a bare `python3 -S` (seed 002) with its HTTP either
  httpx or harness/load/stdlib_http.py: no third-party import, no httpx response;
- the load client's connection (harness/load/stream_connection.py) parses the bytes of its
  own asyncio protocol as they arrive, each read stamped with the kernel's receive time,
  and the sandbox's wire log parses the bytes h11 hands it while it forwards them: neither
  has an httpx response for httpx-sse to read;
- an event is given at its `data:` line, not at the blank line after it (httpx-sse waits
  for that): every OpenAI-compatible server sends one data line an event, and the load
  client stamps a token with the read that completed its line; the blank line may come in
  a later read.
The fitness endpoint, which streams through httpx, uses the same decoder (`events`): one
reading of the wire, not two. harness/fitness/smoke.py alone keeps its own few lines: it
must run as one copied file with nothing beside it (seed 003); a test holds it to this one.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

DONE = "[DONE]"
DONE_BYTES = b"[DONE]"
LINE_CAP = 1 << 20  # one line (a chunk of a few tokens is well under 1 KiB)


class Decoder:
    """Incremental: `feed` each read as it comes, `end` once the body is over."""

    __slots__ = ("_rest", "_cap", "_skipping")

    def __init__(self, line_cap: int = LINE_CAP) -> None:
        self._rest = bytearray()  # the start of a line whose end has not come
        self._cap = line_cap
        self._skipping = False  # inside a line already over the cap: dropped up to its end

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of the `data:` lines that `data` completes, in order."""
        out: list[bytes] = []
        start, end = 0, data.find(b"\n")
        if end >= 0 and (self._rest or self._skipping):
            if not self._skipping:
                self._rest += data[:end]
                _payload(bytes(self._rest), 0, len(self._rest), out)
            self._rest.clear()
            self._skipping = False
            start, end = end + 1, data.find(b"\n", end + 1)
        while end >= 0:  # the common case: whole lines in one read, sliced without a copy of the rest
            _payload(data, start, end, out)
            start, end = end + 1, data.find(b"\n", end + 1)
        if start < len(data) and not self._skipping:
            if len(self._rest) + len(data) - start > self._cap:
                self._rest.clear()
                self._skipping = True
            else:
                self._rest += memoryview(data)[start:]
        return out

    def end(self) -> list[bytes]:
        """The payload of a last line that no newline ended (a body closed mid-line)."""
        out: list[bytes] = []
        if self._rest and not self._skipping:
            _payload(bytes(self._rest), 0, len(self._rest), out)
        self._rest.clear()
        self._skipping = False
        return out


def _payload(buf: bytes, start: int, end: int, out: list[bytes]) -> None:
    if buf.startswith(b"data:", start, end):
        out.append(buf[start + 5:end].strip())


def events(chunks: Iterable[bytes], line_cap: int = LINE_CAP) -> Iterator[str]:
    """The payloads of a body read in chunks (httpx's `iter_bytes()`), as text."""
    decoder = Decoder(line_cap)
    for chunk in chunks:
        for payload in decoder.feed(chunk):
            yield payload.decode("utf-8", "replace")
    for payload in decoder.end():
        yield payload.decode("utf-8", "replace")


async def aevents(chunks: AsyncIterable[bytes], line_cap: int = LINE_CAP) -> AsyncIterator[str]:
    """`events` for an async body (httpx's or stdlib_http's `aiter_bytes()`)."""
    decoder = Decoder(line_cap)
    async for chunk in chunks:
        for payload in decoder.feed(chunk):
            yield payload.decode("utf-8", "replace")
    for payload in decoder.end():
        yield payload.decode("utf-8", "replace")
