"""The model wire as the harness saw it: every request the agent sent to the served model
and every answer, logged by the host side of the sandbox's network bridge (outside the
sandbox, out of the agent's reach), and the run's figures read from that log.

The agent owns opencode's session store (it runs as the same user, in the same folders),
so a store can say anything; the bytes that crossed the bridge cannot be rewritten from
inside. Each exchange on the model port becomes one JSON line of `wire.jsonl`: when the
request started and ended, when the answer's first byte and its end came, the method,
path and status, the model, stream flag and message count asked for, the usage of the
final chunk (or of the whole answer), the tool calls' names and the finish reason.

HTTP/1.1 is parsed with h11 on both directions (keep-alive and chunked bodies included),
each chunk before it is forwarded: bytes the tap cannot parse end the connection (never
relayed unseen; counted as `broken`), and h11's head limit (HEAD_CAP) is above any
server's. A request body is read as it streams and never held (harness/wire/request_head.py:
a few counters a connection, whatever the agent sends); a server-sent-event answer is read
line by line as it streams (harness/wire/sse.py, a line at most its LINE_CAP); a plain JSON
answer is parsed whole up to `BODY_CAP`, and the bytes held across all of a run's
connections never pass BUFFER_BUDGET (past it an answer is counted, not parsed: `unparsed`).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import h11

from harness.wire.request_head import RequestHead
from harness.wire.sse import DONE_BYTES, Decoder

WIRE_LOG = "wire.jsonl"
BODY_CAP = 32 << 20  # a plain (not streamed) answer parsed whole up to this many bytes
BUFFER_BUDGET = 256 << 20  # bytes of answers held at once across every connection of a run
HEAD_CAP = 1 << 20  # h11's limit on a request or response head (uvicorn's is 16 KiB, llama.cpp's 8 KiB a line)


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat() if t else None


@dataclass
class _Exchange:
    started: float
    method: str = ""
    path: str = ""
    head: RequestHead = field(default_factory=RequestHead)
    body_bytes: int = 0
    request_ended: float | None = None
    status: int | None = None
    first_byte: float | None = None
    first_data: float | None = None
    ended: float | None = None
    response_bytes: int = 0
    sse: bool = False
    events: Decoder = field(default_factory=Decoder)
    whole: bytearray = field(default_factory=bytearray)
    usage: dict | None = None
    tool_calls: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    content_chars: int = 0
    unparsed: bool = False  # an answer over BODY_CAP or the run's BUFFER_BUDGET: counted, not parsed

    def record(self) -> dict:
        asked = self.head.result() or {}
        return {"started": _iso(self.started), "request_ended": _iso(self.request_ended),
                "first_byte": _iso(self.first_byte), "first_data": _iso(self.first_data), "ended": _iso(self.ended),
                "seconds": round(self.ended - self.started, 3) if self.ended else None,
                "method": self.method, "path": self.path, "status": self.status, **asked,
                "request_bytes": self.body_bytes, "response_bytes": self.response_bytes,
                "usage": self.usage, "tool_calls": self.tool_calls, "finish_reason": self.finish_reason,
                "content_chars": self.content_chars, **({"unparsed": True} if self.unparsed else {})}

    # -- the answer's body
    def take(self, data: bytes, log: WireLog) -> None:
        self.response_bytes += len(data)
        self.first_data = self.first_data or time.time()
        if not self.sse:
            if len(self.whole) + len(data) <= BODY_CAP and log.reserve(len(data)):
                self.whole += data
            else:
                self.unparsed = True
            return
        for payload in self.events.feed(data):
            self._sse_data(payload)

    def _sse_data(self, payload: bytes) -> None:
        if payload == DONE_BYTES:
            return
        try:
            chunk = json.loads(payload)
        except ValueError:
            return
        self._chunk(chunk, streamed=True)

    def _chunk(self, chunk, streamed: bool) -> None:
        if not isinstance(chunk, dict):
            return
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            part = choice.get("delta" if streamed else "message") or {}
            if not isinstance(part, dict):
                continue
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(part.get(key), str):
                    self.content_chars += len(part[key])
            for call in part.get("tool_calls") or []:
                name = ((call or {}).get("function") or {}).get("name") if isinstance(call, dict) else None
                if name:  # a streamed call names its function once, in its first delta
                    self.tool_calls.append(str(name))

    def finish(self) -> None:
        self.ended = time.time()
        if self.sse:
            for payload in self.events.end():
                self._sse_data(payload)
        elif not self.sse and self.whole and not self.unparsed:
            try:
                self._chunk(json.loads(bytes(self.whole)), streamed=False)
            except ValueError:
                pass

    def release(self, log: WireLog) -> None:
        """What this exchange held of the run's budget, given back."""
        log.release(len(self.whole))
        self.whole = bytearray()


def _usage(raw: dict) -> dict:
    def number(value) -> int:
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    prompt_details = raw.get("prompt_tokens_details") if isinstance(raw.get("prompt_tokens_details"), dict) else {}
    completion_details = (raw.get("completion_tokens_details")
                          if isinstance(raw.get("completion_tokens_details"), dict) else {})
    return {"prompt_tokens": number(raw.get("prompt_tokens")), "completion_tokens": number(raw.get("completion_tokens")),
            "cached_tokens": number(prompt_details.get("cached_tokens")),
            "reasoning_tokens": number(completion_details.get("reasoning_tokens"))}


class WireLog:
    """The log file, shared by every tapped connection of one run."""

    def __init__(self, path: Path, budget: int = BUFFER_BUDGET) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.exchanges = 0
        self.broken = 0  # connections whose bytes were not HTTP/1.1: closed, never relayed on
        self.unparsed = 0  # exchanges whose body was counted, not parsed (over a cap)
        self.budget, self.held, self.peak_held = budget, 0, 0

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.held + n > self.budget:
                return False
            self.held += n
            self.peak_held = max(self.peak_held, self.held)
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.held -= n

    def write(self, entry: dict) -> None:
        with self._lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            self.exchanges += 1
            self.unparsed += bool(entry.get("unparsed"))

    def tap(self, origin: str | None = None) -> Tap:
        return Tap(self, origin)


class Tap:
    """One connection's two directions, each fed the bytes as the relay forwards them."""

    def __init__(self, log: WireLog, origin: str | None = None) -> None:
        self.log = log
        self.origin = origin  # who opened the connection (peers): "opencode", "tool" or "unknown"
        self.client = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_CAP)  # what the agent sent
        self.server = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_CAP)  # what the model answered
        self.lock = threading.Lock()
        self.pending: list[_Exchange] = []
        self.current: _Exchange | None = None
        self.dead = False
        self.cut = False  # the harness ended this connection itself (a retune): its open exchange is no turn

    def up(self, data: bytes) -> bool:
        """The agent's bytes, read before they are forwarded: False ends the connection."""
        return self._feed(self.client, data, self._request_event)

    def down(self, data: bytes) -> bool:
        return self._feed(self.server, data, self._response_event)

    def close(self) -> None:
        with self.lock:
            for ex in [*self.pending, *([self.current] if self.current else [])]:
                if ex.status is not None or ex.request_ended:
                    ex.finish()
                    self.log.write({**ex.record(), "incomplete": True, **({"cut": True} if self.cut else {}),
                                    **self._origin()})
                ex.release(self.log)
            self.pending, self.current = [], None

    def _origin(self) -> dict:
        return {"origin": self.origin} if self.origin else {}

    def _feed(self, conn: h11.Connection, data: bytes, handle) -> bool:
        with self.lock:
            if self.dead:
                return False
            try:
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA or event is h11.PAUSED:
                        break
                    handle(event)
                    if isinstance(event, h11.ConnectionClosed):
                        break
            except (h11.ProtocolError, h11.LocalProtocolError):
                self.dead = True  # never relayed unseen: the bridge closes the connection
                self.log.broken += 1
                return False
            return True

    def _request_event(self, event) -> None:
        if isinstance(event, h11.Request):
            ex = _Exchange(started=time.time(), method=event.method.decode(), path=event.target.decode("latin-1"))
            self.pending.append(ex)
            self.server.send(event)  # the response side now expects this request's answer
        elif isinstance(event, h11.Data) and self.pending:
            ex = self.pending[-1]
            ex.body_bytes += len(event.data)
            ex.head.feed(event.data)
            self.server.send(event)
        elif isinstance(event, h11.EndOfMessage) and self.pending:
            self.pending[-1].request_ended = time.time()
            self.server.send(event)

    def _response_event(self, event) -> None:
        if isinstance(event, h11.InformationalResponse):
            return
        if isinstance(event, h11.Response):
            self.current = self.pending.pop(0) if self.pending else _Exchange(started=time.time())
            self.current.status, self.current.first_byte = event.status_code, time.time()
            ctype = dict(event.headers).get(b"content-type", b"")
            self.current.sse = b"text/event-stream" in ctype
            self.client.send(event)
        elif isinstance(event, h11.Data) and self.current is not None:
            self.current.take(event.data, self.log)
            self.client.send(event)
        elif isinstance(event, h11.EndOfMessage) and self.current is not None:
            self.current.finish()
            self.log.write({**self.current.record(), **self._origin()})
            self.current.release(self.log)
            self.current = None
            self.client.send(event)
            self._next_cycle()

    def _next_cycle(self) -> None:
        if self.client.our_state is h11.DONE and self.client.their_state is h11.DONE:
            self.client.start_next_cycle()
            self.server.start_next_cycle()
            # Bytes of the next request may already sit in the client side's buffer.
            while (event := self.client.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                self._request_event(event)
                if isinstance(event, h11.ConnectionClosed):
                    break


# -- the figures ---------------------------------------------------------------------------
CHAT_PATH = "/chat/completions"


def read_log(path: Path) -> list[dict]:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    out.append(entry)
    except OSError:
        return []
    return out


TOOL_ORIGIN = "tool"


def figures(entries: list[dict]) -> dict:
    """The run's figures from the wire: opencode's chat completions answered 200 are its model
    turns; the calls a tool made on the model's port are counted apart (`tool_requests`)."""
    by_tool = [e for e in entries if e.get("origin") == TOOL_ORIGIN]
    entries = [e for e in entries if e.get("origin") != TOOL_ORIGIN]
    # A call the harness cut mid-answer (a retune serving again: opencode sends it again) is no turn.
    turns = [e for e in entries if str(e.get("path", "")).split("?")[0].endswith(CHAT_PATH) and e.get("status") == 200
             and not e.get("cut")]
    usage = [e.get("usage") or {} for e in turns]
    prompt = sum(u.get("prompt_tokens", 0) for u in usage)
    completion = sum(u.get("completion_tokens", 0) for u in usage)
    cached = sum(u.get("cached_tokens", 0) for u in usage)
    seconds = [e["seconds"] for e in turns if isinstance(e.get("seconds"), (int, float))]
    calls: dict[str, int] = {}
    for e in turns:
        for name in e.get("tool_calls") or []:
            calls[name] = calls.get(name, 0) + 1
    return {"requests": len(entries), "turns": len(turns), "cut": sum(1 for e in entries if e.get("cut")), "failed": sum(1 for e in entries if (e.get("status") or 0) >= 400),
            "without_usage": sum(1 for e in turns if not e.get("usage")),
            "tokens": {"input": prompt, "output": completion, "cache": cached,
                       "reasoning": sum(u.get("reasoning_tokens", 0) for u in usage)},
            "median_turn_s": round(float(statistics.median(seconds)), 3) if seconds else None,
            "tool_calls": dict(sorted(calls.items())),
            "tool_requests": len(by_tool),
            "tool_input_tokens": sum((e.get("usage") or {}).get("prompt_tokens", 0) for e in by_tool)}


TOKEN_TOLERANCE = 0.01  # a share of the wire's figure: the store and the wire read the same usage
TURN_TOLERANCE = 1  # a turn cut off by the harness's own stop may reach one of them only


def _compared(wire: dict, store: dict) -> list[tuple[str, int, int | None, float | None]]:
    """(what, the wire's figure, the store's, the slack that voids past it; None: named only)."""
    tokens = wire["tokens"]
    return [("input tokens", tokens["input"], store.get("input"), TOKEN_TOLERANCE * tokens["input"]),
            ("output tokens", tokens["output"], store.get("output"), TOKEN_TOLERANCE * tokens["output"]),
            ("cache-read tokens", tokens["cache"], store.get("cache_read"), None),
            ("model turns", wire["turns"], store.get("turns"), TURN_TOLERANCE)]


def disagreements(wire: dict, store: dict) -> list[str]:
    """Where opencode's store (`input`, `output`, `cache`, `turns`) departs from the wire's figures:
    an agent that rewrote its store, or a store that missed a call, is named here."""
    return [f"{what}: the store says {stored:,}, the wire {seen:,}"
            for what, seen, stored, _ in _compared(wire, store) if stored is not None and seen != stored]


def decisive(wire: dict, store: dict, settled: dict | None = None) -> list[str]:
    """The disagreements past the tolerance on input, output and turns: no row stands on a run
    whose store and wire tell two stories (a store rewritten, or calls the wire never saw).

    `settled`: for a run the harness itself ended, the wire's figures without the turns its stop
    cut off (`settled_entries`). Opencode may or may not have persisted those, so the store may
    hold anything from `settled` to `wire`; past either end, by the slack, it is decisive."""
    low = {what: seen for what, seen, _, _ in _compared(settled or wire, {})}
    return [f"{what}: the store says {stored:,}, the wire {seen:,}"
            + (f" ({low[what]:,} before the harness's stop)" if low[what] != seen else "")
            for what, seen, stored, slack in _compared(wire, store)
            if stored is not None and slack is not None
            and not low[what] - slack <= stored <= seen + slack]


STOP_GRACE_S = 5.0  # opencode persists a turn's message once its stream ends: allow it this long


def settled_entries(entries: list[dict], stopped_at: float, grace: float = STOP_GRACE_S) -> list[dict]:
    """The exchanges that ended `grace` seconds before the harness stopped the run: each of
    them must be in opencode's store; a later or unfinished one may have died with opencode."""
    def ended(entry: dict) -> float | None:
        try:
            return datetime.fromisoformat(entry["ended"]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None

    return [e for e in entries if (t := ended(e)) is not None and t <= stopped_at - grace]
