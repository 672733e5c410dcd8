"""The replay server's timed mode: tokens on an exact schedule, so measurement error is known.

Every chat (or text) completion streams exactly `max_tokens` tokens: the first
`ttft` seconds after the request arrived (or, behind `--max-running`, after a slot
freed up), then one every `itl` seconds, each deadline computed from that start
(never by accumulating sleeps). With `jitter`, each gap is moved by a seeded
uniform amount in [-jitter, +jitter]; the served log records what was scheduled.
It is a fake model: every token is one of a few common English words.

Ground truth it keeps honest:

- usage: one prompt token per whitespace-separated word of the messages (or the
  prompt), and exactly the streamed tokens as completion tokens;
- `/metrics` (vLLM names by default, or vLLM's retired names, or llama.cpp's):
  running and waiting from the real in-flight count (waiting = queued behind
  `--max-running`), KV usage as the tokens held by running requests over
  `--kv-tokens`, token and preemption counters, split over `--engines` label sets;
- scripting for tests: `--preempt-every K` counts a preemption at the first token
  of every K-th request (marked in the served log), `POST /admin/metrics` adds
  preemptions or extra running/waiting, or pins KV usage;
- its own account of every run (`GET /admin/stats`, cleared by `POST
  /admin/reset-stats`): per request, request arrival to first token written; per
  gap, one token written to the next; per request, the mean gap; and how late each
  write was against its deadline. A client's measurement error is its figure minus
  this account, so a server running late on a busy machine is not charged to it.

It is one asyncio process with its own non-blocking sockets (not asyncio
transports): requests are read with recvmsg and stamped with the kernel's receive
time (SO_TIMESTAMPNS), so a request waiting in its socket while the loop writes
other streams still starts its schedule when it arrived; tokens are written by
timer callbacks straight to send(). The loop waits on epoll through `select()`
with a microsecond timeout, so a deadline is met to within the kernel's timer
slack rather than epoll's whole milliseconds.

    python -m harness.replay.server --timed --port 0 --served-model-name M \\
        [--ttft 0.1] [--itl 0.01] [--jitter 0] [--seed 0] [--max-running 0] ...
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import re
import select
import selectors
import signal
import socket
import sys
import time
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.kernel_stamps import StampedSocket, receive_age_ns

BANNER = "replay server (timed schedule, not a model) listening on http://{host}:{port}"
OWNED_BY = "llms-benchmark-replay"
VERSION = "replay-timed-1"
DEFAULT_MAX_TOKENS = 16
# Each is one token for common tokenizers (BERT word pieces, BPE with a leading space).
WORDS = (" the", " of", " and", " to", " in", " is", " it", " on")
TAG = re.compile(r"^\s*\[([^\]\s]{1,120})\]")
MAX_BODY = 64 * 1024 * 1024
FLAVORS = ("vllm", "vllm-legacy", "llamacpp")


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll for readiness, select() on the epoll fd for a microsecond-precise timeout.

    epoll_wait() takes whole milliseconds (Python rounds up), so asyncio timers on the
    default selector fire up to 1 ms late; select() takes microseconds, and an epoll
    fd is itself pollable, so waiting on it and then harvesting with a zero timeout
    keeps epoll's scaling and gains a precise wake-up.
    """

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None or timeout > 0:
            select.select([self._selector.fileno()], [], [], timeout)
        return super().select(0)


def precise_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until the loop's clock reads `deadline` (an absolute time, not a delay)."""
    if deadline <= loop.time():
        return
    fut = loop.create_future()
    handle = loop.call_at(deadline, _wake, fut)
    try:
        await fut
    finally:
        handle.cancel()


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


# ---------------------------------------------------------------- configuration and state


@dataclass
class Config:
    model: str
    ttft: float = 0.1
    itl: float = 0.01
    jitter: float = 0.0
    seed: int = 0
    max_running: int = 0  # 0: no limit, nothing ever waits
    kv_tokens: int = 262_144
    max_model_len: int = 131_072
    engines: int = 1
    flavor: str = "vllm"
    preempt_every: int = 0
    served_log: Path | None = None


@dataclass
class Engine:
    running: int = 0
    waiting: int = 0
    held: int = 0  # tokens held by running requests (prompt + generated so far)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    preemptions: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"length": 0, "abort": 0})


class State:
    """Everything /metrics and /admin report, changed only on the event loop's thread."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.engines = [Engine() for _ in range(cfg.engines)]
        self.arrivals = 0
        self.extra_running = 0
        self.extra_waiting = 0
        self.extra_preemptions = 0
        self.kv_override: float | None = None
        self.reset_stats()
        self.log = open(cfg.served_log, "a", encoding="utf-8") if cfg.served_log else None  # noqa: SIM115
        self.admission = asyncio.Semaphore(cfg.max_running) if cfg.max_running > 0 else None

    def reset_stats(self) -> None:
        """What /admin/stats summarises, from now on (the bench resets it before every run)."""
        self.lateness_ns = array("q")  # per written token after the first: actual write time minus its deadline
        self.late_first_ns = array("q")  # the same for first tokens
        self.ttft_actual_ns = array("q")  # per request: first token written minus request received
        self.itl_actual_ns = array("q")  # per gap: a token written minus the previous one
        self.itl_request_ns = array("q")  # per completed request: (last - first) / (tokens - 1)

    def kv_usage(self, engine: Engine) -> float:
        if self.kv_override is not None:
            return self.kv_override
        return min(1.0, engine.held / max(1, self.cfg.kv_tokens))

    def write_log(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.log.flush()

    def stats(self) -> dict[str, Any]:
        def summary(values: array) -> dict[str, Any]:
            if not values:
                return {"n": 0}
            us = np.frombuffer(values, dtype=np.int64) / 1000.0
            p50, p99, p999 = np.percentile(us, [50, 99, 99.9])
            return {"n": len(values), "p50_us": round(float(p50), 1), "p99_us": round(float(p99), 1),
                    "p999_us": round(float(p999), 1), "max_us": round(float(us.max()), 1)}

        return {"arrivals": self.arrivals, "token_lateness": summary(self.lateness_ns),
                "first_token_lateness": summary(self.late_first_ns),
                "ttft_actual": summary(self.ttft_actual_ns), "itl_actual": summary(self.itl_actual_ns),
                "itl_request_mean": summary(self.itl_request_ns),
                "running": sum(e.running for e in self.engines), "waiting": sum(e.waiting for e in self.engines)}


# ---------------------------------------------------------------- requests


def count_words(value: Any) -> int:
    """The timed server's tokenizer: one token per whitespace-separated word."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(count_words(part.get("text") if isinstance(part, dict) else part) for part in value)
    return 0


def prompt_of(body: dict[str, Any], chat: bool) -> tuple[int, str]:
    """(prompt tokens, the first user text) of a request body."""
    if chat:
        messages = body.get("messages") or []
        tokens = sum(count_words(m.get("content")) for m in messages)
        first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        if isinstance(first, list):
            first = "".join(p.get("text", "") for p in first if isinstance(p, dict))
        return tokens, first if isinstance(first, str) else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else ""
    return count_words(prompt), prompt or ""


def problem(body: Any, cfg: Config, chat: bool) -> tuple[int, str] | None:
    if not isinstance(body, dict):
        return 400, "the request body must be a JSON object"
    model = body.get("model")
    if model is not None and model != cfg.model:
        return 404, f"The model `{model}` does not exist."
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return 400, "`messages` must be a non-empty list of message objects"
    elif not isinstance(body.get("prompt"), (str, list)):
        return 400, "`prompt` must be a string"
    n = max_tokens(body)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return 400, "max_tokens must be a positive integer"
    return None


def max_tokens(body: dict[str, Any]) -> Any:
    value = body.get("max_completion_tokens") or body.get("max_tokens")
    return DEFAULT_MAX_TOKENS if value is None else value


def schedule(cfg: Config, index: int, n: int) -> list[float]:
    """Offsets from admission of each token: ttft, then one per itl, with seeded jitter."""
    if cfg.jitter <= 0:
        return [cfg.ttft + k * cfg.itl for k in range(n)]
    rng = random.Random(cfg.seed * 1_000_003 + index)
    at = max(0.0, cfg.ttft + rng.uniform(-cfg.jitter, cfg.jitter))
    offsets = [at]
    for _ in range(n - 1):
        at += max(0.0, cfg.itl + rng.uniform(-cfg.jitter, cfg.jitter))
        offsets.append(at)
    return offsets


# ---------------------------------------------------------------- the wire


def http_head(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def whole(status: int, payload: bytes, content_type: str = "application/json") -> bytes:
    return http_head(status, {"Content-Type": content_type, "Content-Length": str(len(payload))}) + payload


def error_response(status: int, message: str) -> bytes:
    type_ = "NotFoundError" if status == 404 else "BadRequestError"
    body = {"error": {"message": message, "type": type_, "param": None, "code": status}}
    return whole(status, json.dumps(body).encode())


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Stream:
    """Pre-encoded SSE events for one streamed answer."""

    def __init__(self, chat: bool, model: str) -> None:
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.head = (f'data: {{"id":"{cid}","object":"{obj}","created":{created},'
                     f'"model":{json.dumps(model)},"choices":[{{"index":0,').encode()
        self.chat = chat
        self.cid, self.created, self.obj, self.model = cid, created, obj, model

    def token(self, word: str, finish: str | None = None) -> bytes:
        fin = "null" if finish is None else f'"{finish}"'
        if self.chat:
            tail = f'"delta":{{"content":"{word}"}},"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        else:
            tail = f'"text":"{word}","logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        return self.head + tail.encode()

    def role(self) -> bytes:
        return self.head + b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'

    def usage(self, prompt: int, completion: int) -> bytes:
        body = {"id": self.cid, "object": self.obj, "created": self.created, "model": self.model, "choices": [],
                "usage": usage(prompt, completion)}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# ---------------------------------------------------------------- metrics exposition


def exposition(state: State) -> bytes:
    cfg = state.cfg
    names = {
        "vllm": dict(running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
                     kv="vllm:kv_cache_usage_perc", preempt="vllm:num_preemptions",
                     prompt="vllm:prompt_tokens", gen="vllm:generation_tokens",
                     queries="vllm:prefix_cache_queries", hits="vllm:prefix_cache_hits"),
        "vllm-legacy": dict(running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
                            kv="vllm:gpu_cache_usage_perc", preempt="vllm:num_preemptions",
                            prompt="vllm:prompt_tokens", gen="vllm:generation_tokens",
                            queries="vllm:gpu_prefix_cache_queries", hits="vllm:gpu_prefix_cache_hits"),
        "llamacpp": dict(running="llamacpp:requests_processing", waiting="llamacpp:requests_deferred",
                         kv="llamacpp:kv_cache_usage_ratio", prompt="llamacpp:prompt_tokens",
                         gen="llamacpp:tokens_predicted"),
    }[cfg.flavor]
    out: list[str] = []

    def family(name: str, kind: str, values: list[float]) -> None:
        exposed = f"{name}_total" if kind == "counter" else name
        out.append(f"# HELP {name} timed replay server (not a model)")
        out.append(f"# TYPE {name} {kind}")
        for i, v in enumerate(values):
            labels = "" if cfg.flavor == "llamacpp" else f'{{engine="{i}",model_name="{cfg.model}"}}'
            out.append(f"{exposed}{labels} {float(v)!r}")

    engines = state.engines
    extra = lambda i, n: n if i == 0 else 0  # noqa: E731 - the scripted extras sit on engine 0
    if cfg.flavor == "llamacpp":  # one engine, no labels
        engines = [Engine(running=sum(e.running for e in state.engines), waiting=sum(e.waiting for e in state.engines),
                          held=sum(e.held for e in state.engines),
                          prompt_tokens=sum(e.prompt_tokens for e in state.engines),
                          generation_tokens=sum(e.generation_tokens for e in state.engines))]
    family(names["running"], "gauge", [e.running + extra(i, state.extra_running) for i, e in enumerate(engines)])
    family(names["waiting"], "gauge", [e.waiting + extra(i, state.extra_waiting) for i, e in enumerate(engines)])
    family(names["kv"], "gauge", [state.kv_usage(e) for e in engines])
    if "preempt" in names:
        family(names["preempt"], "counter", [e.preemptions + extra(i, state.extra_preemptions)
                                             for i, e in enumerate(engines)])
    family(names["prompt"], "counter", [e.prompt_tokens for e in engines])
    family(names["gen"], "counter", [e.generation_tokens for e in engines])
    if "queries" in names:
        family(names["queries"], "counter", [e.prefix_queries for e in engines])
        family(names["hits"], "counter", [0 for _ in engines])  # every prompt is cache-cold here
    if cfg.flavor != "llamacpp":
        out.append("# HELP vllm:request_success timed replay server (not a model)")
        out.append("# TYPE vllm:request_success counter")
        for i, e in enumerate(engines):
            for reason, n in e.finished.items():
                out.append(f'vllm:request_success_total{{engine="{i}",finished_reason="{reason}",'
                           f'model_name="{cfg.model}"}} {float(n)!r}')
    return ("\n".join(out) + "\n").encode()


# ---------------------------------------------------------------- the server


# ---------------------------------------------------------------- sockets

def arrival_time(ancillary: list, loop_now: float) -> float:
    """The kernel's receive time of what recvmsg read, as loop time; now if absent."""
    age = receive_age_ns(ancillary)
    return loop_now if age is None else loop_now - age / 1e9


class Connection(StampedSocket):
    """One client connection on the server's own non-blocking socket.

    Not an asyncio transport, so that requests are read with recvmsg and stamped with the
    kernel's receive time (SO_TIMESTAMPNS): a request that waits in the socket while the
    loop is busy writing other streams still starts its schedule, and the server's account
    of its TTFT, when it really arrived. One request at a time; writes go straight to send().
    """

    def __init__(self, server: TimedServer, sock: socket.socket) -> None:
        sock.setblocking(False)
        super().__init__(asyncio.get_running_loop(), sock)
        self.server = server
        self.inbuf = bytearray()
        self.arrived_at = 0.0
        self.eof = self.busy = self.closing = False
        self.task: asyncio.Task | None = None
        self.start_reading()

    @property
    def gone(self) -> bool:
        """The client hung up (or the connection broke)."""
        return self.closed or self.eof

    def at_eof(self) -> None:
        self.eof = True
        self.loop.remove_reader(self.fd)
        if not self.busy:
            self.close()

    def received(self, data: bytes, ancillary: list) -> None:
        if not self.inbuf:
            self.arrived_at = arrival_time(ancillary, self.loop.time())
        self.inbuf += data
        if len(self.inbuf) > MAX_BODY + (1 << 16):
            self.close()
            return
        self.pump()

    def pump(self) -> None:
        """Start the next complete request, if any and none is in progress."""
        if self.busy or self.closed:
            return
        try:
            request = parse_request(self.inbuf)
        except ValueError:
            self.write(error_response(400, "malformed HTTP request"))
            self.close_when_sent()
            return
        if request is None:
            return
        method, path, headers, body, used = request
        arrived = self.arrived_at
        del self.inbuf[:used]
        if self.inbuf:  # a pipelined request already waiting: it arrived no later than now
            self.arrived_at = self.loop.time()
        self.busy = True
        keep_alive = headers.get("connection", "").lower() != "close"
        self.task = self.loop.create_task(self.server.route(self, method, path, body, arrived))
        self.task.add_done_callback(lambda task: self.finished(task, keep_alive))

    def finished(self, task: asyncio.Task, keep_alive: bool) -> None:
        self.busy = False
        self.task = None
        keep = not task.cancelled() and task.exception() is None and task.result() and keep_alive
        if not keep or self.eof:
            self.close_when_sent()
        else:
            self.pump()

    def drained(self) -> None:
        if self.closing:
            self.close()

    def close_when_sent(self) -> None:
        if self.out and not self.closed:
            self.closing = True
        else:
            self.close()

    def on_close(self) -> None:
        self.server.connections.discard(self)


def parse_request(buf: bytearray) -> tuple[str, str, dict[str, str], bytes, int] | None:
    """(method, path, headers, body, bytes used) of the first complete request in `buf`, or None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > 1 << 16:
            raise ValueError("request head too large")
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    start = end + 4
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, at = bytearray(), start
        while True:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                return None
            size = int(bytes(buf[at:eol]).split(b";")[0].strip() or b"0", 16)
            at = eol + 2
            if size == 0:
                trailer = buf.find(b"\r\n\r\n", at - 2)
                if trailer < 0:
                    return None
                return method, path, headers, bytes(body), trailer + 4
            if len(buf) < at + size + 2:
                return None
            body += buf[at:at + size]
            at += size + 2
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY:
        raise ValueError("body too large")
    if len(buf) < start + length:
        return None
    return method, path, headers, bytes(buf[start:start + length]), start + length


# ---------------------------------------------------------------- the server


class Player:
    """One streamed answer driven by timer callbacks: each writes its token(s) and arms the next."""

    def __init__(self, server: TimedServer, sse: Stream, conn: Connection, engine: Engine, received: float,
                 admitted: float, offsets: list[float], prompt_tokens: int, include_usage: bool,
                 preempted: bool) -> None:
        self.loop = asyncio.get_running_loop()
        self.state, self.sse, self.conn, self.engine = server.state, sse, conn, engine
        self.received = received
        self.first_at = self.last_at = 0.0
        self.deadlines = [admitted + offset for offset in offsets]
        self.prompt_tokens, self.include_usage, self.preempted = prompt_tokens, include_usage, preempted
        self.tokens = [chunked(sse.token(word)) for word in WORDS]  # every middle chunk, encoded once
        self.sent = 0
        self.done: asyncio.Future = self.loop.create_future()
        self.handle = self.loop.call_at(self.deadlines[0], self.tick)

    def tick(self) -> None:
        loop, deadlines, n = self.loop, self.deadlines, len(self.deadlines)
        now = loop.time()
        if self.conn.gone:
            self.finish()  # the client hung up
            return
        # Normally one token; a server running late writes every token already due, in order.
        while self.sent < n and deadlines[self.sent] <= now + 1e-6:
            k = self.sent
            if k == n - 1:  # the last token, then usage and [DONE], and the body's end
                data = (self.sse.role() if k == 0 else b"") + self.sse.token(WORDS[k % len(WORDS)], "length")
                if self.include_usage:
                    data += self.sse.usage(self.prompt_tokens, n)
                data = chunked(data + b"data: [DONE]\n\n") + b"0\r\n\r\n"
            elif k == 0:  # the role chunk travels with the first token
                data = chunked(self.sse.role() + self.sse.token(WORDS[0]))
            else:
                data = self.tokens[k % len(WORDS)]
            if k == 0 and self.preempted:
                self.engine.preemptions += 1
            self.conn.write(data)
            written = loop.time()
            state = self.state
            if k == 0:
                state.late_first_ns.append(int((written - deadlines[0]) * 1e9))
                state.ttft_actual_ns.append(int((written - self.received) * 1e9))
                self.first_at = written
            else:
                state.lateness_ns.append(int((written - deadlines[k]) * 1e9))
                state.itl_actual_ns.append(int((written - self.last_at) * 1e9))
            self.last_at = written
            if k == n - 1 and n > 1:
                state.itl_request_ns.append(int((written - self.first_at) / (n - 1) * 1e9))
            self.sent += 1
            self.engine.generation_tokens += 1
            self.engine.held += 1
            now = written
        if self.sent == n:
            self.finish()
        else:
            self.handle = loop.call_at(deadlines[self.sent], self.tick)

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(self.sent)

    def stop(self) -> None:
        self.handle.cancel()


class TimedServer:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.state = State(cfg)
        self.connections: set[Connection] = set()

    def accept(self, listener: socket.socket) -> None:
        for _ in range(256):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.connections.add(Connection(self, sock))

    async def route(self, conn: Connection, method: str, path: str, body: bytes, received: float) -> bool:
        """Answer one request; False to close the connection after it."""
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET":
            if path == "/health":
                conn.write(whole(200, b'{"status":"ok"}'))
            elif path == "/v1/models":
                conn.write(whole(200, json.dumps(self.models()).encode()))
            elif path == "/version":
                conn.write(whole(200, json.dumps({"version": VERSION}).encode()))
            elif path == "/metrics":
                conn.write(whole(200, exposition(self.state), "text/plain; version=0.0.4; charset=utf-8"))
            elif path == "/admin/stats":
                conn.write(whole(200, json.dumps(self.state.stats()).encode()))
            else:
                conn.write(error_response(404, f"no route {path}"))
            return True
        if method != "POST":
            conn.write(error_response(405, f"{method} is not served"))
            return True
        if path in ("/v1/chat/completions", "/v1/completions"):
            return await self.complete(conn, path == "/v1/chat/completions", body, received)
        if path == "/admin/metrics":
            conn.write(whole(200, json.dumps(self.script(body)).encode()))
        elif path == "/admin/reset-stats":
            self.state.reset_stats()
            conn.write(whole(200, b"{}"))
        else:
            conn.write(error_response(404, f"no route {path}"))
        return True

    def models(self) -> dict[str, Any]:
        model = {"id": self.cfg.model, "object": "model", "created": int(time.time()), "owned_by": OWNED_BY,
                 "max_model_len": self.cfg.max_model_len, "root": "timed schedule (not a model)"}
        return {"object": "list", "data": [model]}

    def script(self, body: bytes) -> dict[str, Any]:
        """POST /admin/metrics {"preemptions": +n, "running": n, "waiting": n, "kv_usage": x|null}."""
        try:
            change = json.loads(body or b"{}")
        except ValueError:
            change = {}
        s = self.state
        s.extra_preemptions += int(change.get("preemptions", 0))
        s.extra_running = int(change.get("running", s.extra_running))
        s.extra_waiting = int(change.get("waiting", s.extra_waiting))
        if "kv_usage" in change:
            s.kv_override = None if change["kv_usage"] is None else float(change["kv_usage"])
        return {"extra_preemptions": s.extra_preemptions, "extra_running": s.extra_running,
                "extra_waiting": s.extra_waiting, "kv_override": s.kv_override}

    # -- a completion

    async def complete(self, conn: Connection, chat: bool, raw: bytes, received: float) -> bool:
        """The schedule starts when the request arrived (the kernel's receive time), or when a
        running slot freed up for it (`--max-running`)."""
        loop = asyncio.get_running_loop()
        arrived_wall = time.time() - (loop.time() - received)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        refused = problem(body, self.cfg, chat)
        if refused:
            conn.write(error_response(*refused))
            self.state.write_log({"status": refused[0], "error": refused[1], "started": arrived_wall})
            return True
        s = self.state
        index = s.arrivals
        s.arrivals += 1
        engine = s.engines[index % len(s.engines)]
        prompt_tokens, first_text = prompt_of(body, chat)
        n = max_tokens(body)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        offsets = schedule(self.cfg, index, n)
        tag = (m.group(1) if (m := TAG.match(first_text)) else None)
        preempted = bool(self.cfg.preempt_every) and (index + 1) % self.cfg.preempt_every == 0

        engine.waiting += 1
        admitted = received
        running, sent, player = False, 0, None
        try:
            if s.admission is not None:
                if s.admission.locked():
                    await s.admission.acquire()
                    admitted = loop.time()
                else:
                    await s.admission.acquire()
            engine.waiting -= 1
            engine.running += 1
            running = True
            engine.held += prompt_tokens
            engine.prompt_tokens += prompt_tokens
            engine.prefix_queries += prompt_tokens
            if stream:
                conn.write(http_head(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "Transfer-Encoding": "chunked"}))
                player = Player(self, Stream(chat, self.cfg.model), conn, engine, received, admitted, offsets,
                                prompt_tokens, include_usage, preempted)
                try:
                    await player.done
                finally:
                    player.stop()
                    sent = player.sent
            else:
                await sleep_until(loop, admitted + offsets[-1])
                sent = n
                engine.generation_tokens += n
                if preempted:
                    engine.preemptions += 1
                conn.write(whole(200, json.dumps(self.completion_body(chat, prompt_tokens, n)).encode()))
        finally:
            if running:
                engine.running -= 1
                engine.held -= prompt_tokens + sent
                if s.admission is not None:
                    s.admission.release()
            else:
                engine.waiting -= 1
            completed = sent == n
            engine.finished["length" if completed else "abort"] += 1
            s.write_log({
                "index": index, "tag": tag, "status": 200, "stream": stream, "endpoint": "chat" if chat else "text",
                "engine": s.engines.index(engine), "preempted": preempted,
                "usage": usage(prompt_tokens, sent) if completed else None, "tokens_sent": sent,
                "queue_s": round(admitted - received, 6), "ttft_s": round(offsets[0], 6),
                "itl_mean_s": round((offsets[-1] - offsets[0]) / (n - 1), 6) if n > 1 else None,
                # CLOCK_MONOTONIC seconds (the clock of time.perf_counter in every process here): when
                # the request arrived (the kernel's receive time), its first and last tokens were written
                "received_mono": received, "first_token_mono": player.first_at if player else None,
                "last_token_mono": player.last_at if player else None,
                "started": arrived_wall, "finished": time.time(),
            })
        return stream is False or completed

    def completion_body(self, chat: bool, prompt_tokens: int, n: int) -> dict[str, Any]:
        text = "".join(WORDS[k % len(WORDS)] for k in range(n))
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "length"}
            obj, prefix = "chat.completion", "chatcmpl"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            obj, prefix = "text_completion", "cmpl"
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                "model": self.cfg.model, "choices": [choice], "usage": usage(prompt_tokens, n)}


async def serve(cfg: Config, host: str, port: int, stop: asyncio.Event) -> None:
    server = TimedServer(cfg)
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=4096)
    listener.setblocking(False)
    loop.add_reader(listener.fileno(), server.accept, listener)
    bound = listener.getsockname()[1]
    gc.collect()
    gc.freeze()  # what startup made is never collected; fewer and shorter pauses on the hot path
    print(BANNER.format(host=host, port=bound), flush=True)
    try:
        await stop.wait()
    finally:
        loop.remove_reader(listener.fileno())
        listener.close()
        tasks = [c.task for c in server.connections if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in list(server.connections):
            conn.close()
        if server.state.log is not None:
            server.state.log.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    timed = parser.add_argument_group("timed mode (--timed)")
    timed.add_argument("--timed", action="store_true", help="tokens on an exact schedule instead of a trajectory")
    timed.add_argument("--ttft", type=float, default=0.1, help="seconds from admission to the first token")
    timed.add_argument("--itl", type=float, default=0.01, help="seconds between tokens")
    timed.add_argument("--jitter", type=float, default=0.0, help="seeded uniform jitter (seconds) on every gap")
    timed.add_argument("--seed", type=int, default=0)
    timed.add_argument("--max-running", type=int, default=0, help="requests beyond this wait (0: no limit)")
    timed.add_argument("--kv-tokens", type=int, default=262_144, help="simulated KV-cache capacity in tokens")
    timed.add_argument("--engines", type=int, default=1, help="label sets the metrics are split over")
    timed.add_argument("--metrics-flavor", choices=FLAVORS, default="vllm")
    timed.add_argument("--preempt-every", type=int, default=0, help="a preemption at every K-th request")


def main(args: argparse.Namespace) -> int:
    if args.ttft < 0 or args.itl < 0 or args.jitter < 0 or args.engines < 1:
        print("error: --ttft, --itl and --jitter must be >= 0 and --engines >= 1", file=sys.stderr)
        return 2
    cfg = Config(model=args.served_model_name, ttft=args.ttft, itl=args.itl, jitter=args.jitter, seed=args.seed,
                 max_running=args.max_running, kv_tokens=args.kv_tokens, max_model_len=args.max_model_len,
                 engines=args.engines, flavor=args.metrics_flavor, preempt_every=args.preempt_every,
                 served_log=args.served_log)
    loop = precise_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        loop.run_until_complete(serve(cfg, args.host, args.port, stop))
    finally:
        loop.close()
    return 0
