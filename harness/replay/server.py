"""The `replay` model server: an OpenAI-compatible streaming endpoint that plays a script.

It is a fake model for tests and demos. Every answer comes from a trajectory file
(see `harness.replay.trajectory`), so a run against it is deterministic apart from
ids and wall-clock jitter. It speaks the real wire protocol (`/v1/chat/completions`
with SSE, `/v1/models`, vLLM-named `/metrics`), so the harness drives it exactly
as it drives vLLM.

    python -m harness.replay.server --trajectory FILE --host 127.0.0.1 --port 0 \\
        --served-model-name NAME --max-model-len N [--served-log PATH]
    python -m harness.replay.server --timed --port 0 --served-model-name NAME [--ttft S --itl S ...]

The second form is the timed mode (`harness.replay.timed`): tokens on an exact
schedule, for measuring a load client's error.

Layout: pure functions read a request and plan a `Reply` (a timeline of deltas);
`Exchange` plays one reply against the clock, the metrics and the served log;
`Handler` only routes and writes bytes.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from harness.errors import UserError
from harness.replay import timed
from harness.replay.trajectory import (
    DEFAULT_TTFT,
    Fallback,
    Scenario,
    Step,
    Trajectory,
    Usage,
    load_trajectory,
)

BANNER = "replay server (scripted trajectory, not a model) listening on http://{host}:{port}"
OWNED_BY = "llms-benchmark-replay"
END_TEXT = "(end of scripted trajectory)"
DEFAULT_MAX_TOKENS = 64
# Tool-call arguments are streamed in pieces of this many characters, as a real
# model's tokens would split them.
ARGUMENT_PIECE = 12
FALLBACK_WORDS = ("replay", "tokens", "stream", "at", "a", "scripted", "pace", "for", "probes")
# How often a wait looks for a shut-down server or a client that hung up.
POLL_S = 0.05


# ---------------------------------------------------------------- reading a request


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of `{type: text, text}` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def first_user_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def count_assistant_messages(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """An estimate (about 4 characters a token), not a tokenizer count.

    The replay server has no tokenizer; the harness's probe reads `usage`, which
    reports this same number, so the estimate is all anyone sees.
    """
    chars = sum(len(message_text(m.get("content"))) for m in messages)
    return max(1, math.ceil(chars / 4))


def requested_max_tokens(body: dict[str, Any]) -> int:
    # vLLM's precedence: max_completion_tokens, then max_tokens.
    value = body.get("max_completion_tokens") or body.get("max_tokens")
    return DEFAULT_MAX_TOKENS if value is None else value


def request_problem(body: Any, served_model: str) -> tuple[int, str, str] | None:
    """(status, message, type) when the request cannot be served, as vLLM would refuse it."""
    if not isinstance(body, dict):
        return 400, "the request body must be a JSON object", "BadRequestError"
    model = body.get("model")
    if model is not None and model != served_model:
        return 404, f"The model `{model}` does not exist.", "NotFoundError"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return 400, "`messages` must be a non-empty list of message objects", "BadRequestError"
    max_tokens = requested_max_tokens(body)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        return 400, "max_tokens must be a non-negative integer", "BadRequestError"
    return None


# ---------------------------------------------------------------- planning a reply


@dataclass(frozen=True)
class Piece:
    """One delta, `at` seconds after the request arrived, carrying `tokens` generated tokens."""

    at: float
    delta: dict[str, Any]
    tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """Everything the server will do for one chat request, decided before it starts."""

    kind: str  # tool_calls | text | stall | error | fallback | end
    trajectory: str | None
    step: int | None
    status: int = 200
    pieces: tuple[Piece, ...] = ()  # the first one is the role chunk, at time-to-first-token
    finish_at: float = 0.0
    finish_reason: str | None = None
    usage: Usage | None = None
    stall: float = 0.0
    error: dict[str, Any] | None = None  # OpenAI error body

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens if self.usage else 0


def plan_reply(trajectory: Trajectory, body: dict[str, Any]) -> Reply:
    """Stateless step selection: the scenario by the first user message, the step by the
    number of assistant messages. A retried request therefore gets the same step."""
    messages = body["messages"]
    scenario = trajectory.find(first_user_text(messages))
    if scenario is None:
        return plan_fallback(trajectory.fallback, messages, requested_max_tokens(body))
    index = count_assistant_messages(messages)
    if index >= len(scenario.steps):
        return plan_end(scenario, index, messages)
    return plan_step(scenario, index, scenario.steps[index], messages)


def plan_step(scenario: Scenario, index: int, step: Step, messages: list[dict[str, Any]]) -> Reply:
    where = {"trajectory": scenario.name, "step": index}
    if step.kind == "error":
        err = step.error
        return Reply(kind="error", status=err.status, error=error_body(err.message, err.type, err.status), **where)
    if step.kind == "stall":
        return Reply(kind="stall", stall=step.stall, **where)
    deltas = [{"reasoning_content": p} for p in words(step.reasoning or "")]
    deltas += [{"content": p} for p in words(step.text or "")]
    deltas += tool_call_deltas(step.tool_calls or [])
    # Without scripted usage: the prompt estimate and one token per streamed piece.
    usage = step.usage or Usage(prompt_tokens=estimate_prompt_tokens(messages), completion_tokens=len(deltas))
    return Reply(
        kind=step.kind,
        pieces=spread(deltas, step.ttft, step.total_duration, usage.completion_tokens),
        finish_at=step.total_duration,
        finish_reason="tool_calls" if step.tool_calls else "stop",
        usage=usage,
        **where,
    )


def plan_end(scenario: Scenario, index: int, messages: list[dict[str, Any]]) -> Reply:
    deltas = [{"content": p} for p in words(END_TEXT)]
    usage = Usage(prompt_tokens=estimate_prompt_tokens(messages), completion_tokens=len(deltas))
    finish_at = DEFAULT_TTFT + 0.05
    return Reply(
        kind="end",
        trajectory=scenario.name,
        step=index,
        pieces=spread(deltas, DEFAULT_TTFT, finish_at, usage.completion_tokens),
        finish_at=finish_at,
        finish_reason="stop",
        usage=usage,
    )


def plan_fallback(fallback: Fallback, messages: list[dict[str, Any]], max_tokens: int) -> Reply:
    """Simulated speed: prefill at prefill_tps, then max_tokens tokens at decode_tps."""
    prompt_tokens = estimate_prompt_tokens(messages)
    ttft = prompt_tokens / fallback.prefill_tps
    step_s = 1.0 / fallback.decode_tps
    pieces = [Piece(ttft, {"role": "assistant", "content": ""})]
    pieces += [
        Piece(ttft + k * step_s, {"content": f" {FALLBACK_WORDS[k % len(FALLBACK_WORDS)]}"}, 1)
        for k in range(max_tokens)
    ]
    return Reply(
        kind="fallback",
        trajectory=None,
        step=None,
        pieces=tuple(pieces),
        finish_at=pieces[-1].at,
        # The probe always runs to max_tokens, as vLLM does with ignore_eos.
        finish_reason="length",
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=max_tokens),
    )


def words(text: str) -> list[str]:
    """Split text into word-sized pieces that join back to exactly the text."""
    return re.findall(r"\s*\S+|\s+$", text)


def tool_call_deltas(calls: list[Any]) -> list[dict[str, Any]]:
    """OpenAI-style tool-call deltas: a header per call, then its arguments in pieces."""
    deltas: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        header = {"index": i, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function"}
        deltas.append({"tool_calls": [{**header, "function": {"name": call.name, "arguments": ""}}]})
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        for start in range(0, len(args), ARGUMENT_PIECE):
            piece = args[start : start + ARGUMENT_PIECE]
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    return deltas


def spread(deltas: list[dict[str, Any]], ttft: float, duration: float, tokens: int) -> tuple[Piece, ...]:
    """Role chunk at ttft, then the deltas evenly over the rest of the duration.

    The completion tokens are shared out over the deltas (over the role chunk when
    there are none) so the generation-token counter grows as the stream does.
    """
    shares = split_evenly(tokens, max(1, len(deltas)))
    role = Piece(ttft, {"role": "assistant", "content": ""}, 0 if deltas else shares[0])
    gap = (duration - ttft) / max(1, len(deltas))
    return (role, *(Piece(ttft + k * gap, d, shares[k]) for k, d in enumerate(deltas)))


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


# ---------------------------------------------------------------- the wire format


def error_body(message: str, type_: str | None, status: int) -> dict[str, Any]:
    """The error object vLLM returns (OpenAI shape)."""
    default_type = "BadRequestError" if status < 500 else "InternalServerError"
    return {"error": {"message": message, "type": type_ or default_type, "param": None, "code": status}}


def chunk(cid: str, created: int, model: str, delta: dict[str, Any], finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}


def usage_chunk(cid: str, created: int, model: str, usage: Usage) -> dict:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage.openai(),
    }


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold streamed deltas into one assistant message, the way an OpenAI client does."""
    content, reasoning, calls = "", "", {}
    for delta in deltas:
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        for tc in delta.get("tool_calls") or []:
            call = calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            call["id"] = tc.get("id") or call["id"]
            fn = tc.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def completion_body(reply: Reply, cid: str, created: int, model: str) -> dict[str, Any]:
    """The non-streaming `chat.completion` object with the same content and usage."""
    choice = {
        "index": 0,
        "message": assemble([p.delta for p in reply.pieces]),
        "logprobs": None,
        "finish_reason": reply.finish_reason,
    }
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": reply.usage.openai() if reply.usage else None,
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


# ---------------------------------------------------------------- metrics and the served log

# vLLM's own bucket edges, so dashboards and the harness read both the same way.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort")


class Metrics:
    """vLLM's metric names, kept truthful for what this server does.

    A request counts as waiting until its first token (the scripted ttft stands in
    for queueing and prefill) and as running while it streams. KV-cache usage is
    simulated as the tokens held by in-flight requests over one max_model_len.
    """

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.registry = CollectorRegistry()
        self.max_model_len = max_model_len

        def make(kind: type, name: str, doc: str, **kw: Any) -> Any:
            return kind(name, doc, ["model_name"], registry=self.registry, **kw).labels(model_name)

        self.running = make(Gauge, "vllm:num_requests_running", "Requests streaming tokens.")
        self.waiting = make(Gauge, "vllm:num_requests_waiting", "Requests before their first token.")
        self.kv = make(Gauge, "vllm:kv_cache_usage_perc", "Simulated KV-cache usage (1 = 100%).")
        self.prompt = make(Counter, "vllm:prompt_tokens", "Prefill tokens processed.")
        self.generation = make(Counter, "vllm:generation_tokens", "Generation tokens processed.")
        self.preemptions = make(Counter, "vllm:num_preemptions", "Preemptions (never, here).")
        self.cache_queries = make(Counter, "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.cache_hits = make(Counter, "vllm:prefix_cache_hits", "Prompt tokens found there (the scripted cached_tokens).")
        # No queue here (every request runs at once); the scripted ttft is all prefill.
        self.queue_time = make(Histogram, "vllm:request_queue_time_seconds", "Time waiting (always 0 here).",
                               buckets=E2E_BUCKETS)
        self.prefill_time = make(Histogram, "vllm:request_prefill_time_seconds", "Time to first token.",
                                 buckets=E2E_BUCKETS)
        self.decode_time = make(Histogram, "vllm:request_decode_time_seconds", "First token to the end.",
                                buckets=E2E_BUCKETS)
        self.ttft = make(Histogram, "vllm:time_to_first_token_seconds", "Time to first token.", buckets=TTFT_BUCKETS)
        self.e2e = make(Histogram, "vllm:e2e_request_latency_seconds", "Request latency.", buckets=E2E_BUCKETS)
        success = Counter(
            "vllm:request_success", "Finished requests.", ["model_name", "finished_reason"], registry=self.registry
        )
        self.success = {reason: success.labels(model_name, reason) for reason in FINISHED_REASONS}
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}

    def arrived(self) -> None:
        self.waiting.inc()

    def first_token(self, key: int, ttft: float, prompt_tokens: int, cached_tokens: int = 0) -> None:
        # Running first: a reader that sees no request running sees whole counters.
        self.running.inc()
        self.waiting.dec()
        self.ttft.observe(ttft)
        self.prompt.inc(prompt_tokens)
        self.cache_queries.inc(prompt_tokens)
        self.cache_hits.inc(cached_tokens)
        self._hold(key, prompt_tokens)

    def generated(self, key: int, tokens: int) -> None:
        if tokens:
            self.generation.inc(tokens)
            self._hold(key, tokens)

    def left(self, key: int, running: bool, finished_reason: str, e2e: float | None,
             ttft: float | None = None) -> None:
        # Observed before the request stops counting as running (see first_token).
        self.success[finished_reason].inc()
        if e2e is not None:
            self.e2e.observe(e2e)
            if ttft is not None:
                self.queue_time.observe(0.0)
                self.prefill_time.observe(ttft)
                self.decode_time.observe(max(0.0, e2e - ttft))
        (self.running if running else self.waiting).dec()
        with self._lock:
            self._held.pop(key, None)
            self._update_kv()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _hold(self, key: int, tokens: int) -> None:
        with self._lock:
            self._held[key] = self._held.get(key, 0) + tokens
            self._update_kv()

    def _update_kv(self) -> None:
        self.kv.set(min(1.0, sum(self._held.values()) / max(1, self.max_model_len)))


class ServedLog:
    """One JSON line per chat request: the ground truth tests compare measurements with."""

    def __init__(self, path: Path | None) -> None:
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - lives with the server

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


# ---------------------------------------------------------------- playing a reply


@dataclass
class Exchange:
    """One chat request in flight: its clock, its metrics and its served-log line."""

    server: ReplayServer
    sock: socket.socket
    started: float = field(default_factory=time.time)
    clock0: float = field(default_factory=time.monotonic)
    key: int = field(default_factory=lambda: uuid.uuid4().int)

    def refuse(self, status: int, record: dict[str, Any]) -> None:
        """A request answered at once with an HTTP error: no metrics, one log line."""
        self._log({**record, "kind": "error", "status": status, "usage": None})

    def play(
        self,
        reply: Reply,
        start: Callable[[], None] = lambda: None,
        emit: Callable[[Piece], None] = lambda piece: None,
        end: Callable[[], None] = lambda: None,
    ) -> None:
        """Send the headers (`start`), emit each piece on time, then `end` the answer.

        Stops early when the server shuts down or the client hangs up; a stall always
        ends that way or by running out its time, without an answer.
        """
        # Counted as waiting before any header goes out, so /metrics never lags the client.
        self.server.metrics.arrived()
        running, completed, first_at = False, False, None
        try:
            start()
            if reply.kind == "stall":
                self.wait_until(reply.stall)
                return
            for piece in reply.pieces:
                if not self.wait_until(piece.at):
                    return
                if not running:
                    first_at = self.elapsed()
                    cached = reply.usage.cached_tokens if reply.usage else 0
                    self.server.metrics.first_token(self.key, first_at, reply.prompt_tokens, cached)
                    running = True
                emit(piece)
                self.server.metrics.generated(self.key, piece.tokens)
            if self.wait_until(reply.finish_at):
                end()
                completed = True
        except ConnectionError:
            pass  # the client hung up: recorded below as cut off, no traceback
        finally:
            self._finish(reply, running, completed, first_at)

    def wait_until(self, at: float) -> bool:
        """Wait until `at` seconds after arrival; False if the server stops or the client leaves."""
        while (remaining := at - self.elapsed()) > 0:
            if self.server.stopping.wait(min(remaining, POLL_S)) or client_gone(self.sock):
                return False
        return True

    def elapsed(self) -> float:
        return time.monotonic() - self.clock0

    def _finish(self, reply: Reply, running: bool, completed: bool, first_at: float | None = None) -> None:
        reason = (reply.finish_reason if reply.finish_reason in ("stop", "length") else "stop") if completed else "abort"
        self.server.metrics.left(self.key, running, reason, self.elapsed() if completed else None, first_at)
        self._log(
            {
                "trajectory": reply.trajectory,
                "step": reply.step,
                "kind": reply.kind,
                "status": reply.status,
                # Usage only when the whole answer (and so its usage) was served.
                "usage": reply.usage.openai() if completed and reply.usage else None,
            }
        )

    def _log(self, record: dict[str, Any]) -> None:
        base = {"trajectory": None, "step": None}
        self.server.served_log.write({**base, **record, "started": self.started, "finished": time.time()})


def client_gone(sock: socket.socket) -> bool:
    """True once the peer has closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


# ---------------------------------------------------------------- HTTP


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        trajectory: Trajectory,
        model_name: str,
        max_model_len: int,
        served_log: Path | None = None,
    ) -> None:
        super().__init__(address, Handler)
        self.trajectory = trajectory
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.metrics = Metrics(model_name, max_model_len)
        self.served_log = ServedLog(served_log)
        self.stopping = threading.Event()
        self.in_flight = 0
        self.in_flight_lock = threading.Lock()
        self.api_key: str | None = None  # set from --api-key-env: the variable's name on argv, never the key

    def models_body(self) -> dict[str, Any]:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": OWNED_BY,
            "max_model_len": self.max_model_len,
            "root": self.trajectory.label,
        }
        return {"object": "list", "data": [model]}

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up is normal traffic, not a fault worth a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ReplayServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the served log is the record; per-request stderr lines are noise

    def refused_key(self, route: str) -> bool:
        """Like vLLM's --api-key: /v1 routes need `Authorization: Bearer <key>`."""
        key = self.server.api_key
        if key is None or not route.startswith("/v1"):
            return False
        if hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {key}"):
            return False
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        if self.refused_key(route):
            return
        if route == "/health":
            self.send_json(200, {"status": "ok"})
        elif route == "/v1/models":
            self.send_json(200, self.server.models_body())
        elif route == "/metrics":
            self.send_bytes(200, self.server.metrics.exposition(), CONTENT_TYPE_LATEST)
        else:
            self.send_json(404, error_body(f"no route {route}", "NotFoundError", 404))

    def do_POST(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        if self.refused_key(route):
            return
        if route != "/v1/chat/completions":
            self.send_json(404, error_body(f"no route {route}", "NotFoundError", 404))
            return
        with self.server.in_flight_lock:
            self.server.in_flight += 1
        try:
            self.chat()
        finally:
            with self.server.in_flight_lock:
                self.server.in_flight -= 1

    def chat(self) -> None:
        exchange = Exchange(self.server, self.connection)
        try:
            body = json.loads(self.read_body() or b"null")
        except (ValueError, UnicodeDecodeError):
            body = None
        problem = request_problem(body, self.server.model_name)
        if problem is not None:
            status, message, type_ = problem
            exchange.refuse(status, {})
            self.send_json(status, error_body(message, type_, status))
            return
        reply = plan_reply(self.server.trajectory, body)
        if reply.kind == "error":
            exchange.refuse(reply.status, {"trajectory": reply.trajectory, "step": reply.step})
            self.send_json(reply.status, reply.error)
        elif body.get("stream"):
            self.stream(exchange, reply, body)
        else:
            self.respond_whole(exchange, reply)

    def stream(self, exchange: Exchange, reply: Reply, body: dict[str, Any]) -> None:
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), self.server.model_name
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def end() -> None:
            self.write(sse(chunk(cid, created, model, {}, reply.finish_reason)))
            if include_usage and reply.usage:
                self.write(sse(usage_chunk(cid, created, model, reply.usage)))
            self.write(sse("[DONE]"))

        exchange.play(
            reply,
            start=lambda: self.start_open_ended("text/event-stream"),
            emit=lambda piece: self.write(sse(chunk(cid, created, model, piece.delta))),
            end=end,
        )

    def respond_whole(self, exchange: Exchange, reply: Reply) -> None:
        if reply.kind == "stall":
            exchange.play(reply, start=lambda: self.start_open_ended("application/json"))
            return
        cid, model = f"chatcmpl-{uuid.uuid4().hex}", self.server.model_name
        exchange.play(reply, end=lambda: self.send_json(200, completion_body(reply, cid, int(time.time()), model)))

    # -- bytes on the wire

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def read_chunked(self) -> bytes:
        data = b""
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            data += self.rfile.read(size)
            self.rfile.readline()
        while self.rfile.readline().strip():  # trailers
            pass
        return data

    def start_open_ended(self, content_type: str) -> None:
        """Headers for a body of unknown length: it ends when the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.flush()

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, status: int, payload: Any) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json")

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        """A whole response; a ConnectionError propagates (the server's handle_error drops it)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.write(data)


# ---------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.replay.server",
        description="Serve a scripted trajectory over the OpenAI chat API (a fake model for tests and demos).",
    )
    parser.add_argument("--trajectory", type=Path, help="trajectory YAML file (required unless --timed)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--served-model-name", required=True, help="the only model name accepted")
    parser.add_argument("--max-model-len", type=int, help="reported by /v1/models (required unless --timed)")
    parser.add_argument("--served-log", type=Path, help="append one JSON line per chat request here")
    parser.add_argument("--api-key-env", help="require `Bearer <key>` on /v1, the key read from this variable")
    timed.add_arguments(parser)
    args = parser.parse_args(argv)
    if not args.timed and (args.trajectory is None or args.max_model_len is None):
        parser.error("--trajectory and --max-model-len are required (or --timed for the exact-schedule mode)")
    if args.timed and args.max_model_len is None:
        args.max_model_len = 131_072
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.timed:
        return timed.main(args)
    try:
        trajectory = load_trajectory(args.trajectory)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return UserError.exit_code
    address = (args.host, args.port)
    if args.api_key_env and not os.environ.get(args.api_key_env):
        print(f"--api-key-env: ${args.api_key_env} is not set", file=sys.stderr)
        return UserError.exit_code
    server = ReplayServer(address, trajectory, args.served_model_name, args.max_model_len, args.served_log)
    server.api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    print(BANNER.format(host=args.host, port=server.server_address[1]), flush=True)
    while not stop.wait(0.5):
        pass
    shut_down(server)
    return 0


def shut_down(server: ReplayServer, grace_s: float = 2.0) -> None:
    """Stop accepting, end stalls and streams, let them write their log lines, then close."""
    server.stopping.set()
    server.shutdown()
    deadline = time.monotonic() + grace_s
    while server.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    server.server_close()
    server.served_log.close()


if __name__ == "__main__":
    sys.exit(main())
