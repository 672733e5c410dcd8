"""The fitness endpoint's stream fold as the tool-call benches use it: time to first token
from the first *generated* delta (not the role-only opener vLLM and llama.cpp send at once),
llama.cpp's `timings`, calls folded by index across chunks; and the well-formed check against
any tool list (the benches pass opencode's own)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.fitness.endpoint import Endpoint
from harness.fitness.phases.tooluse import TOOL_SPECS, check_call

DELAY_S = 0.4
TIMINGS = {"prompt_n": 812, "cache_n": 4096, "prompt_per_second": 37.5, "predicted_per_second": 9.1}


def _chunk(delta: dict | None, finish: str | None = None, **extra) -> bytes:
    data = {"object": "chat.completion.chunk", "choices": [] if delta is None else
            [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(data)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not body.get("stream"):
            payload = json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": "whole"}}],
                                  "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "timings": TIMINGS}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        # the opener arrives at once and carries nothing generated: it must not stop the TTFT clock
        self.wfile.write(_chunk({"role": "assistant", "content": ""}))
        self.wfile.flush()
        time.sleep(DELAY_S)
        self.wfile.write(_chunk({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                                 "function": {"name": "bash", "arguments": ""}}]}))
        self.wfile.write(_chunk({"tool_calls": [{"index": 1, "id": "c1", "type": "function",
                                                 "function": {"name": "read", "arguments": '{"filePath"'}}]}))
        self.wfile.write(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": "ls",'}}]}))
        self.wfile.write(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "description": "x"}'}}]}))
        self.wfile.write(_chunk({"tool_calls": [{"index": 1, "function": {"arguments": ': "a.py"}'}}]}))
        self.wfile.write(_chunk({}, "tool_calls", timings=TIMINGS))  # llama.cpp puts its timings on the last chunk
        self.wfile.write(_chunk(None, usage={"prompt_tokens": 812, "completion_tokens": 30}))
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_stream_times_the_first_generated_delta_and_reads_llamacpp_timings(server: str) -> None:
    answer = Endpoint(server, "m", timeout_s=10).stream([{"role": "user", "content": "hi"}])
    assert answer.ttft_s is not None and DELAY_S <= answer.ttft_s < DELAY_S + 2
    assert answer.timings == TIMINGS
    assert answer.usage == {"prompt_tokens": 812, "completion_tokens": 30}
    assert answer.finish == "tool_calls"
    # interleaved deltas of two calls land in their own slots, in index order
    assert answer.calls == [{"name": "bash", "arguments": '{"command": "ls", "description": "x"}'},
                            {"name": "read", "arguments": '{"filePath": "a.py"}'}]
    assert check_call(answer.calls[0]) == (True, "bash", {"command": "ls", "description": "x"})


def test_whole_answers_carry_timings_and_no_ttft(server: str) -> None:
    answer = Endpoint(server, "m", timeout_s=10).chat([{"role": "user", "content": "hi"}])
    assert answer.content == "whole" and answer.timings == TIMINGS and answer.ttft_s is None


def test_check_call_judges_against_the_tool_list_it_is_given() -> None:
    """The benches pass opencode's own tools: a tool the fitness list lacks is known there, and a
    fitness tool unknown to it is refused; required keys come from the list given."""
    opencode = {"todowrite": {"name": "todowrite", "parameters": {"type": "object", "required": ["todos"]}},
                "webfetch": {"name": "webfetch"}}  # no parameters at all: nothing required
    assert "todowrite" not in TOOL_SPECS
    assert check_call({"name": "todowrite", "arguments": '{"todos": []}'}, opencode)[:2] == (True, "todowrite")
    assert check_call({"name": "todowrite", "arguments": "{}"}, opencode)[:2] == (
        False, "todowrite: missing required todos")
    assert check_call({"name": "webfetch", "arguments": "{}"}, opencode)[0] is True
    assert check_call({"name": "bash", "arguments": '{"command": "ls", "description": "x"}'}, opencode)[:2] == (
        False, "unknown tool 'bash'")
    assert check_call({"name": "todowrite", "arguments": "[1]"}, opencode)[:2] == (
        False, "todowrite: arguments are not a JSON object")
