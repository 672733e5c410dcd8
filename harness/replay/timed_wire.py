"""The timed replay server's bytes: one client connection on its own stamped socket,
reading a request (its prompt, what is wrong with it, its token schedule), writing HTTP
heads, chunked SSE tokens and JSON answers, and the vLLM- or llama.cpp-named /metrics
exposition of its state."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import socket
import time
import uuid
from collections.abc import Coroutine
from typing import Any, Protocol

from harness.kernel_stamps import StampedSocket, receive_age_ns
from harness.replay.timed_state import Config, Engine, State


class Router(Protocol):
    """What a connection needs of its server (`timed.TimedServer`): where a request goes, and the
    set it leaves when it closes."""

    connections: set[Connection]

    def route(self, conn: Connection, method: str, path: str, body: bytes,
              received: float) -> Coroutine[Any, Any, bool]: ...


DEFAULT_MAX_TOKENS = 16
MAX_BODY = 64 * 1024 * 1024


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


def messages_digest(body: dict[str, Any]) -> list[list]:
    """[role, words, the first 16 hex digits of blake2b(content)] for each message of a chat, so a
    test reads what each request carried (a replayed answer, say) without the log holding it."""
    out = []
    for m in body.get("messages") or []:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        out.append([m.get("role"), count_words(content), hashlib.blake2b(text.encode(), digest_size=8).hexdigest()])
    return out


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

CREATED = time.time()  # the `_created` gauges' value: when this server's counters began


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
        vllm = cfg.flavor != "llamacpp"
        labels = [f'{{engine="{i}",model_name="{cfg.model}"}}' if vllm else "" for i in range(len(values))]
        # As vLLM 0.32 writes a counter (prometheus_client): its TYPE names the _total sample, and
        # a `_created` gauge family follows with each series' creation time.
        out.append(f"# HELP {exposed if vllm else name} timed replay server (not a model)")
        out.append(f"# TYPE {exposed if vllm else name} {kind}")
        out.extend(f"{exposed}{label} {float(v)!r}" for label, v in zip(labels, values))
        if vllm and kind == "counter":
            out.append(f"# HELP {name}_created timed replay server (not a model)")
            out.append(f"# TYPE {name}_created gauge")
            out.extend(f"{name}_created{label} {CREATED!r}" for label in labels)

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
        out.append("# HELP vllm:request_success_total timed replay server (not a model)")
        out.append("# TYPE vllm:request_success_total counter")
        for i, e in enumerate(engines):
            for reason, n in e.finished.items():
                out.append(f'vllm:request_success_total{{engine="{i}",finished_reason="{reason}",'
                           f'model_name="{cfg.model}"}} {float(n)!r}')
    return ("\n".join(out) + "\n").encode()


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

    def __init__(self, server: Router, sock: socket.socket) -> None:
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
