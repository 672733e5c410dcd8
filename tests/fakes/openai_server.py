"""A tiny loopback OpenAI-compatible server for tests, on its own thread and event loop.

It speaks the real wire protocol: `GET /v1/models` (vLLM 0.32's model card: root, parent,
max_model_len, permission), `GET /metrics` (vLLM 0.32's names and form: `engine`/`model_name`
labels, counters typed by their `_total` sample, a `_created` gauge beside each), and
`POST /v1/chat/completions` streamed as SSE `data: {...}` chunks ending in
`data: [DONE]`, with tool-call deltas split into pieces and a final usage chunk. What
it answers is decided by two functions the test gives:

- `refuse(request, n)` -> `(status, headers)` or None: refuse this request (e.g. 429 with
  Retry-After); `n` counts the chat requests this API key has sent before this one;
- `reply(body)` -> `Answer`: the tool calls and/or text, and the usage to report.

Every chat request is kept in `seen` (arrival time, key, body, status), the ground truth
the tests compare the classroom's figures with.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODEL = "fake-model"
PIECE = 7  # characters per streamed piece of tool-call arguments


@dataclass
class Answer:
    text: str = ""
    tool_calls: list[tuple[str, dict | str]] = field(default_factory=list)  # (name, arguments)
    prompt_tokens: int = 100
    completion_tokens: int = 10
    cached_tokens: int = 0
    stall: bool = False  # send the headers, then nothing until the server stops


@dataclass
class Seen:
    t: float  # time.monotonic() when the request had been read
    key: str | None
    body: dict
    status: int = 200
    usage: dict | None = None  # what the usage chunk reported, once it was sent

    @property
    def messages(self) -> list[dict]:
        return self.body["messages"]


def text_only(body: dict) -> Answer:
    """A model that never calls tools: 100 prompt tokens a message, 10 completion tokens."""
    return Answer(text="Done, the change is in place.", prompt_tokens=100 * len(body["messages"]), completion_tokens=10)


class FakeOpenAI:
    def __init__(self, reply: Callable[[dict], Answer] = text_only,
                 refuse: Callable[[Seen, int], tuple[int, dict] | None] | None = None,
                 model: str = MODEL, metrics: bool = True, max_model_len: int = 65536,
                 tls: Any = None) -> None:
        self.tls = tls  # an ssl.SSLContext (server side): the fake speaks HTTPS
        self.reply = reply
        self.max_model_len = max_model_len
        self.created = int(time.time())
        self.refuse = refuse
        self.model = model
        self.metrics = metrics
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.running = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    # -- life

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        handlers: set[asyncio.Task] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            handlers.add(task)
            try:
                await self._handle(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                handlers.discard(task)
                writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=self.tls)
        port = server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in list(handlers):
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

    # -- ground truth

    def chats(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)

    # -- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in
                   (line.split(":", 1) for line in header_lines if ":" in line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        auth = headers.get("authorization", "")
        key = auth.removeprefix("Bearer ") if auth else None
        if method == "GET" and path == "/v1/models":
            await self._send(writer, 200, {"object": "list", "data": [self._model_card()]})
        elif method == "GET" and path == "/metrics" and self.metrics:
            await self._send_text(writer, 200, self._exposition())
        elif method == "POST" and path == "/v1/chat/completions":
            await self._chat(writer, key, json.loads(body))
        else:
            await self._send(writer, 404, {"error": {"message": f"no route {path}", "code": 404}})

    async def _chat(self, writer: asyncio.StreamWriter, key: str | None, body: dict) -> None:
        seen = Seen(time.monotonic(), key, body)
        with self.lock:
            before = sum(1 for s in self.seen if s.key == key)
            self.seen.append(seen)
        refused = self.refuse(seen, before) if self.refuse else None
        if refused is not None:
            seen.status, extra = refused
            await self._send(writer, seen.status, {"error": {"message": "slow down", "code": seen.status}}, extra)
            return
        answer = self.reply(body)
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())

        def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": self.model,
                    "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage is not None:
                data["usage"] = usage
            return f"data: {json.dumps(data)}\n\n".encode()

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Connection: close\r\n\r\n")
        self.running += 1
        try:
            writer.write(chunk({"role": "assistant", "content": ""}))
            await writer.drain()
            if answer.stall:
                await asyncio.sleep(3600)
            for word in answer.text.split(" ") if answer.text else []:
                writer.write(chunk({"content": word + " "}))
            for i, (name, args) in enumerate(answer.tool_calls):
                arguments = args if isinstance(args, str) else json.dumps(args)
                writer.write(chunk({"tool_calls": [{"index": i, "id": f"call_{i}_{uuid.uuid4().hex[:6]}",
                                                    "type": "function",
                                                    "function": {"name": name, "arguments": ""}}]}))
                for start in range(0, len(arguments), PIECE):
                    piece = arguments[start:start + PIECE]
                    writer.write(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
            writer.write(chunk({}, "tool_calls" if answer.tool_calls else "stop"))
            usage = {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                     "total_tokens": answer.prompt_tokens + answer.completion_tokens,
                     "prompt_tokens_details": {"cached_tokens": answer.cached_tokens}}
            if (body.get("stream_options") or {}).get("include_usage"):
                writer.write(chunk(None, usage=usage))
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
            seen.usage = usage
        finally:
            self.running -= 1

    def _model_card(self) -> dict:
        """As vLLM 0.32 answers /v1/models (read from the real server)."""
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "vllm", "root": self.model,
                "parent": None, "max_model_len": self.max_model_len,
                "permission": [{"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission",
                                "created": self.created, "allow_create_engine": False, "allow_sampling": True,
                                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                "allow_fine_tuning": False, "organization": "*", "group": None,
                                "is_blocking": False}]}

    def _exposition(self) -> str:
        with self.lock:
            served = [s.usage for s in self.seen if s.usage]
        prompt = sum(u["prompt_tokens"] for u in served)
        cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in served)
        generated = sum(u["completion_tokens"] for u in served)
        label = f'{{engine="0",model_name="{self.model}"}}'
        lines = []
        for name, kind, value in (
            ("vllm:num_requests_running", "gauge", self.running), ("vllm:num_requests_waiting", "gauge", 0),
            ("vllm:kv_cache_usage_perc", "gauge", 0.25), ("vllm:num_preemptions", "counter", 0),
            ("vllm:prompt_tokens", "counter", prompt), ("vllm:generation_tokens", "counter", generated),
            ("vllm:prefix_cache_queries", "counter", prompt), ("vllm:prefix_cache_hits", "counter", cached),
        ):
            if kind == "gauge":
                lines += [f"# TYPE {name} gauge", f"{name}{label} {float(value)}"]
            else:  # as vLLM 0.32's prometheus_client writes a counter
                lines += [f"# TYPE {name}_total counter", f"{name}_total{label} {float(value)}",
                          f"# TYPE {name}_created gauge", f"{name}_created{label} {float(self.created)}"]
        return "".join(f"{line}\n" for line in lines)

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (extra or {}).items())
        writer.write((head + "Connection: close\r\n\r\n").encode() + data)
        await writer.drain()

    async def _send_text(self, writer: asyncio.StreamWriter, status: int, text: str) -> None:
        data = text.encode()
        writer.write(f"HTTP/1.1 {status} OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
