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
import re
import signal
import socket
import sys
import time
import uuid
from typing import Any

from harness.replay.precise_loop import precise_loop, sleep_until
from harness.replay.timed_state import Config, Engine, State
from harness.replay.wire import model_card
from harness.replay.timed_wire import Connection
from harness.replay.timed_wire import (
    messages_digest,
    Stream,
    chunked,
    error_response,
    exposition,
    http_head,
    max_tokens,
    problem,
    prompt_of,
    schedule,
    usage,
    whole,
)

BANNER = "replay server (timed schedule, not a model) listening on http://{host}:{port}"
OWNED_BY = "llms-benchmark-replay"
VERSION = "replay-timed-1"
# Each is one token for common tokenizers (BERT word pieces, BPE with a leading space).
WORDS = (" the", " of", " and", " to", " in", " is", " it", " on")
TAG = re.compile(r"^\s*\[([^\]\s]{1,120})\]")
FLAVORS = ("vllm", "vllm-legacy", "llamacpp")


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
            # Stamped as the bytes are handed to the kernel: send() wakes the reading client, and
            # on a busy host the scheduler may run it before this loop resumes, so a stamp taken
            # after send() returns can be late by a time slice (the truth read ~0.6 ms long).
            written = loop.time()
            self.conn.write(data)
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
        return {"object": "list", "data": [model_card(self.cfg.model, OWNED_BY, self.cfg.max_model_len,
                                                      "timed schedule (not a model)")]}

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
                # what a chat carried, message by message (written after the answer, off its schedule)
                "messages": messages_digest(body) if chat else None,
                "skip_special_tokens": body.get("skip_special_tokens"),
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
