"""What a chat request asked, read from its JSON body while the bytes stream past: the top
level's `model` and `stream`, and how many `messages` and `tools` it sends.

Nothing of the body is held. The wire tap relays the model port for an agent that may send
anything on it; it used to keep each request body whole (up to a run-wide budget) and parse
it at the end, and 60 unfinished 16 MiB bodies then cost the launcher ~530 MiB of resident
memory for a 256 MiB budget (the copies and the allocator's arenas across the relay's
threads). Here a string's content is skipped by an unambiguous regex in C (linear in its
length); what is kept is a few counters and at most KEY_CAP bytes of a top-level key or
MODEL_CAP of the model's name.

Why not a streaming JSON library: ijson (3.3.0, its yajl2_c backend) holds a string until it
ends, so the same unfinished string grew its process by 32 MiB for 32 MiB sent (measured on
this machine) — per connection, the very cost this module removes.

The reading equals `json.loads` on a valid body (tests/test_request_head.py holds it to that
on generated bodies cut at every kind of boundary). It is not a validator: a body that is
not a JSON object, or ends unbalanced or inside a string, reads as None; one json.loads
refuses for a subtler fault (a trailing comma, a bare word) may read as what it seems to
say. The server refuses such a body whatever the log records.
"""

from __future__ import annotations

import json
import re

KEY_CAP = 64  # a top-level key kept to tell model/stream/messages/tools apart ("\\u006d..." included)
MODEL_CAP = 1024  # the model's name, raw; a longer one reads as None
LITERAL_CAP = 8  # `true` / `false` for stream

# No possessive quantifier or atomic group: CPython before 3.11.5 matched them wrongly when their
# subpattern backtracks (gh-106052; Debian 12's python3 is 3.11.2, where `ab "x` read as one deep
# run). Each pattern is unambiguous (single classes, the unrolled string loop), so it is linear
# without them: a string cut before its quote gives back once, in one pass.
# A string's content up to its closing quote, or to the chunk's end (a lone backslash left there).
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)
# Below what is read: whole strings and anything but a bracket, up to a bracket or a cut string.
_DEEP = re.compile(rb'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.S)
# Outside strings: whitespace, then one structural byte or one run of a scalar (number, literal).
_TOKEN = re.compile(rb'[ \t\r\n]*(?:([\[\]{},:"])|([^ \t\r\n\[\]{},:"]+))?')
_COUNTED = {"messages": None, "tools": 0}  # each count's value when the key's value is not a list


class RequestHead:
    """Fed a request body's bytes in any cuts; `result()` once it has ended."""

    def __init__(self) -> None:
        self.depth = 0
        self.closed = self.bad = False
        self.in_string = self.escape = False
        self.role: str | None = None  # what the open string is kept for: "key", "model" or None
        self.kept = bytearray()
        self.over = False
        self.expect_key = False  # at depth 1, the next string is a key
        self.key: str | None = None  # the depth-1 key whose value is being read
        self.array: str | None = None  # "messages" or "tools" while its array (depth 2) is open
        self.item_open = False
        self.count = 0
        self.scalar_open = False  # the last chunk ended inside a scalar
        self.literal: bytearray | None = None
        self.asked: dict = {"model": None, "stream": None, "messages": None, "tools": 0}

    # -- in
    def feed(self, data: bytes) -> None:
        if not data:
            return
        pos, end = 0, len(data)
        continuing, self.scalar_open = self.scalar_open, False
        while pos < end and not self.bad:
            if self.in_string:
                pos = self._string(data, pos)
                continue
            if self.depth >= 3 or (self.depth == 2 and self.array is None):  # nothing read down there
                pos = _DEEP.match(data, pos).end()
                if pos == end:
                    break
                if data[pos] == 0x22:  # a string the chunk cuts: its end comes in a later one
                    self.in_string, self.role, pos = True, None, pos + 1
                    continue
                continuing = False  # a bracket: read below
            m = _TOKEN.match(data, pos)
            structural, scalar = m.group(1), m.group(2)
            if scalar is not None:
                if not (continuing and m.start(2) == 0):
                    self._value_start()
                self._scalar(scalar)
                self.scalar_open = m.end() == end
            elif structural is not None:
                self._structural(structural)
            pos = m.end()
            continuing = False

    def _string(self, data: bytes, pos: int) -> int:
        if self.escape:
            self._keep(data[pos:pos + 1])
            self.escape = False
            return pos + 1
        stop = _STRING_BODY.match(data, pos).end()
        self._keep(data[pos:stop])
        if stop == len(data):
            return stop
        if data[stop] == 0x5C:  # a backslash ending the chunk: the byte it escapes comes next
            self._keep(b"\\")
            self.escape = True
            return stop + 1
        self.in_string = False  # the closing quote
        self._string_end()
        return stop + 1

    def _keep(self, part: bytes) -> None:
        if self.role is None or self.over:
            return
        cap = KEY_CAP if self.role == "key" else MODEL_CAP
        if len(self.kept) + len(part) > cap:
            self.over, self.kept = True, bytearray()
        else:
            self.kept += part

    def _string_end(self) -> None:
        if self.role is None:
            return
        text = None
        if not self.over:
            try:
                text = json.loads(b'"' + bytes(self.kept) + b'"')
            except ValueError:
                text = None
        if self.role == "key":
            self.key, self.expect_key = (text if isinstance(text, str) else ""), False
        elif self.role == "model":
            self.asked["model"] = text
        self.role, self.kept, self.over = None, bytearray(), False

    def _structural(self, byte: bytes) -> None:
        if self.closed:  # anything but whitespace after the object
            self.bad = True
            return
        if byte in b"{[":
            if self.depth == 0:
                self.expect_key, self.bad = True, byte != b"{"
            else:
                self._value_start()
                if self.depth == 1 and byte == b"[" and self.key in _COUNTED:
                    self.array, self.count, self.item_open = self.key, 0, False
            self.depth += 1
        elif byte in b"}]":
            if self.depth == 1:
                self._value_end()
            self.depth -= 1
            if self.depth < 0:
                self.bad = True
            elif self.depth == 1 and self.array is not None:
                self.asked[self.array], self.array = self.count, None
            elif self.depth == 0:
                self.closed = True
        elif byte == b",":
            if self.depth == 1:
                self._value_end()
                self.expect_key = True
            elif self.depth == 2 and self.array is not None:
                self.item_open = False
        elif byte == b":":
            if self.depth == 1:
                self.expect_key = False
        else:  # a quote opens a string
            if self.depth == 0:
                self.bad = True
                return
            if self.depth == 1 and self.expect_key:
                self.role = "key"
            else:
                self._value_start()
                self.role = "model" if self.depth == 1 and self.key == "model" else None
            self.in_string = True

    def _scalar(self, run: bytes) -> None:
        if self.depth == 0 or self.closed:
            self.bad = True
        elif self.depth == 1:  # a depth-1 value's own scalar, not one inside it
            if self.literal is not None and len(self.literal) + len(run) <= LITERAL_CAP:
                self.literal += run
            else:
                self.literal = None

    def _value_start(self) -> None:
        """A value begins at the current depth: counted in a tracked array, or the depth-1 key's."""
        if self.depth == 2 and self.array is not None and not self.item_open:
            self.count += 1
            self.item_open = True
        elif self.depth == 1:
            if self.key in _COUNTED:
                self.asked[self.key] = _COUNTED[self.key]  # a list sets it when it closes
            elif self.key == "model":
                self.asked["model"] = None  # a string sets it when it ends
            self.literal = bytearray() if self.key == "stream" else None

    def _value_end(self) -> None:
        if self.key == "stream":
            self.asked["stream"] = {b"true": True, b"false": False}.get(bytes(self.literal or b""))
        self.literal = None

    # -- out
    def result(self) -> dict | None:
        """model, stream, messages and tools as json.loads of the whole body would give them;
        None for a body that is not one complete JSON object."""
        if self.bad or not self.closed:
            return None
        return dict(self.asked)
