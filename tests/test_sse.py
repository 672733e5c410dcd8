"""harness/wire/sse.py, the one SSE decoder: the same events however the bytes are cut into
reads, CRLF or LF, a last line without a newline, a line over the cap dropped whole; and the
stand-alone smoke's few lines (harness/fitness/smoke.py) agree with it."""

from __future__ import annotations

import asyncio
import json

from harness.fitness.smoke import sse_data
from harness.wire import sse

STREAM = (b": keep-alive comment\r\n\r\n"
          b'data: {"choices":[{"delta":{"content":"h\xc3\xa9"}}]}\r\n\r\n'
          b"event: message\n"
          b'data:{"choices":[{"delta":{"content":" there"}}]}\n\n'
          b"id: 3\n"
          b'data: {"usage":{"prompt_tokens":5}}  \n\n'
          b"data: [DONE]\n\n")
PAYLOADS = [b'{"choices":[{"delta":{"content":"h\xc3\xa9"}}]}', b'{"choices":[{"delta":{"content":" there"}}]}',
            b'{"usage":{"prompt_tokens":5}}', b"[DONE]"]


def _fed(reads: list[bytes], cap: int = sse.LINE_CAP) -> list[bytes]:
    decoder = sse.Decoder(cap)
    out = [p for r in reads for p in decoder.feed(r)]
    return out + decoder.end()


def test_every_cut_of_the_stream_gives_the_same_events() -> None:
    assert _fed([STREAM]) == PAYLOADS
    for cut in range(len(STREAM) + 1):
        assert _fed([STREAM[:cut], STREAM[cut:]]) == PAYLOADS, cut
    assert _fed([STREAM[i:i + 1] for i in range(len(STREAM))]) == PAYLOADS  # a byte a read


def test_an_event_is_given_at_its_data_line_not_at_the_blank_line() -> None:
    decoder = sse.Decoder()
    assert decoder.feed(b'data: {"n": 1}\n') == [b'{"n": 1}']  # the read that completes the line
    assert decoder.feed(b"\n") == []


def test_a_last_line_without_newline_is_given_at_the_end_only() -> None:
    decoder = sse.Decoder()
    assert decoder.feed(b"data: [DO") == [] and decoder.feed(b"NE]") == []
    assert decoder.end() == [b"[DONE]"] and decoder.end() == []


def test_a_line_over_the_cap_is_dropped_whole_and_the_next_one_read() -> None:
    long = b"data: " + b"x" * 100 + b"\n"
    reads = [b"data: 1\n", long[:30], long[30:70], long[70:], b"data: 2\n"]
    assert _fed(reads, cap=64) == [b"1", b"2"]
    assert _fed([b"data: 1\n" + long + b"data: 2\n"], cap=64) == [b"1", b"x" * 100, b"2"]  # a whole line is not held
    decoder = sse.Decoder(64)
    decoder.feed(b"data: " + b"y" * 200)  # no newline: never held past the cap
    assert len(decoder._rest) == 0 and decoder.end() == []


def test_the_text_readers_sync_and_async() -> None:
    chunks = [STREAM[:40], STREAM[40:41], STREAM[41:]]
    text = [p.decode() for p in PAYLOADS]
    assert list(sse.events(chunks)) == text

    async def body():
        for chunk in chunks:
            yield chunk

    async def read() -> list[str]:
        return [p async for p in sse.aevents(body())]

    assert asyncio.run(read()) == text
    assert list(sse.events([b"data: \xff{}\n"])) == ["\ufffd{}"]  # bad UTF-8 replaced, as httpx's lines were


def test_the_stand_alone_smoke_reads_the_stream_as_the_decoder_does() -> None:
    lines = STREAM.splitlines(keepends=True)  # what urllib's response yields, line by line
    assert list(sse_data(lines)) == [p.decode() for p in PAYLOADS]
    odd = [b"data:[DONE]\r\n", b"data:\n", b"  data: no\n", b"DATA: no\n", b"data: \xff\n", b"data: {}"]
    assert list(sse_data(odd)) == list(sse.events(odd))
    assert json.loads(next(sse_data([b'data: {"a": 1}\r\n']))) == {"a": 1}
