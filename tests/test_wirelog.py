"""The model wire log kept by the sandbox bridge's host side: what crosses the model port
is parsed as HTTP/1.1 (SSE answers, keep-alive, chunked bodies), logged one exchange a line,
and turned into the run's figures; opencode's store is checked against them."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from harness.sandbox.net import Bridge
from harness.sandbox.wirelog import WireLog, disagreements, figures, read_log
from fakes.openai_server import Answer, FakeOpenAI


def _through(bridge: Bridge, port: int) -> httpx.Client:
    """An HTTP client that reaches 127.0.0.1:port through the bridge's Unix socket, as the
    sandbox's forwarder does."""
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(bridge.folder / f"{port}.sock")),
                        base_url=f"http://127.0.0.1:{port}", timeout=30)


def test_a_streamed_answer_is_logged_with_its_usage_tool_calls_and_times(tmp_path: Path):
    answer = Answer(tool_calls=[("bash", {"command": "ls", "description": "list"}), ("read", {"filePath": "a"})],
                    prompt_tokens=4321, completion_tokens=77, cached_tokens=4000)
    with FakeOpenAI(reply=lambda body: answer) as fake:
        port = urlsplit(fake.url).port
        log = WireLog(tmp_path / "wire.jsonl")
        bridge = Bridge([port], wire=(port, log))
        try:
            with _through(bridge, port) as client:
                body = {"model": "fake-model", "stream": True, "stream_options": {"include_usage": True},
                        "messages": [{"role": "user", "content": "hi"}] * 3, "tools": [{"type": "function"}] * 2}
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    streamed = b"".join(response.iter_bytes())
                assert client.get("/v1/models").status_code == 200
        finally:
            bridge.close()
    assert b"[DONE]" in streamed  # the relay forwarded the stream whole
    entries = read_log(tmp_path / "wire.jsonl")
    chat, models = entries
    assert chat["path"] == "/v1/chat/completions" and chat["status"] == 200 and chat["stream"] is True
    assert (chat["messages"], chat["tools"], chat["model"]) == (3, 2, "fake-model")
    assert chat["usage"] == {"prompt_tokens": 4321, "completion_tokens": 77, "cached_tokens": 4000,
                             "reasoning_tokens": 0}
    assert chat["tool_calls"] == ["bash", "read"] and chat["finish_reason"] == "tool_calls"
    assert chat["started"] <= chat["first_byte"] <= chat["ended"] and chat["seconds"] >= 0
    assert models["path"] == "/v1/models" and models["usage"] is None
    seen = figures(entries)
    assert seen["turns"] == 1 and seen["requests"] == 2
    assert seen["tokens"] == {"input": 4321, "output": 77, "cache": 4000, "reasoning": 0}
    assert seen["tool_calls"] == {"bash": 1, "read": 1}


class _KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # one connection, many requests

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
            raw = b""
            while size := int(self.rfile.readline().strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
        n = len(json.loads(raw)["messages"])
        answer = json.dumps({"choices": [{"message": {"content": "ok", "tool_calls": [
            {"function": {"name": "write", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100 * n, "completion_tokens": n}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def test_keep_alive_and_a_chunked_request_body_are_two_exchanges(tmp_path: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    log = WireLog(tmp_path / "wire.jsonl")
    bridge = Bridge([port], wire=(port, log))
    try:
        with _through(bridge, port) as client:
            one = {"model": "m", "messages": [{"role": "user", "content": "a"}]}
            assert client.post("/v1/chat/completions", json=one).status_code == 200
            two = json.dumps({"model": "m", "messages": [{"role": "user", "content": "b"}] * 4}).encode()
            chunks = (two[i:i + 10] for i in range(0, len(two), 10))  # an iterator: sent chunked
            assert client.post("/v1/chat/completions", content=chunks).status_code == 200
    finally:
        bridge.close()
        server.shutdown()
    assert sum(bridge.connections.values()) == 1  # both on one connection
    entries = read_log(tmp_path / "wire.jsonl")
    assert [e["messages"] for e in entries] == [1, 4]
    assert [e["usage"]["prompt_tokens"] for e in entries] == [100, 400]
    assert [e["tool_calls"] for e in entries] == [["write"], ["write"]]
    assert figures(entries)["tokens"]["input"] == 500


def test_bytes_that_are_not_http_are_relayed_all_the_same_and_counted(tmp_path: Path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def echo() -> None:
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    log = WireLog(tmp_path / "wire.jsonl")
    bridge = Bridge([port], wire=(port, log))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(bridge.folder / f"{port}.sock"))
        sock.sendall(b"\x00\x01 not http at all\r\n\r\n")
        assert sock.recv(1024).startswith(b"\x00\x01 not http")
        sock.close()
    finally:
        bridge.close()
        listener.close()
    assert log.broken == 1 and read_log(tmp_path / "wire.jsonl") == []


def test_a_store_that_departs_from_the_wire_is_named():
    wire = {"tokens": {"input": 1000, "output": 50, "cache": 800, "reasoning": 0}, "turns": 4}
    honest = {"input": 1000, "output": 50, "cache_read": 800, "turns": 4}
    assert disagreements(wire, honest) == []
    forged = {**honest, "input": 501_000, "turns": 2}
    assert disagreements(wire, forged) == ["input tokens: the store says 501,000, the wire 1,000",
                                           "model turns: the store says 2, the wire 4"]
