"""The model wire log kept by the sandbox bridge's host side: what crosses the model port
is parsed as HTTP/1.1 (SSE answers, keep-alive, chunked bodies), logged one exchange a line,
and turned into the run's figures; opencode's store is checked against them."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from harness.sandbox.net import Bridge
from harness.sandbox.wirelog import WireLog, decisive, disagreements, figures, read_log, settled_entries
from fakes.openai_server import Answer, FakeOpenAI


def _entry(bridge: Bridge, port: int) -> int:
    """A listening socket handed to the bridge for `port`, as the sandbox's inside.py hands its
    own (there bound at the same port inside the agent's namespace); the port it listens on."""
    listener = socket.create_server(("127.0.0.1", 0))
    bridge.adopt(listener, port)
    return listener.getsockname()[1]


def _through(bridge: Bridge, port: int) -> httpx.Client:
    """An HTTP client that reaches 127.0.0.1:port through the bridge."""
    return httpx.Client(base_url=f"http://127.0.0.1:{_entry(bridge, port)}", timeout=30)


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
    # one line per exchange, in the order the exchanges ended: the fake ends its stream by closing
    # the connection, so the chat's line may follow the next request's
    assert sorted(e["path"] for e in entries) == ["/v1/chat/completions", "/v1/models"]
    chat, models = sorted(entries, key=lambda e: e["path"])
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


def test_bytes_that_are_not_http_end_the_connection_unrelayed_and_are_counted(tmp_path: Path):
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
        sock = socket.create_connection(("127.0.0.1", _entry(bridge, port)), timeout=10)
        sock.sendall(b"\x00\x01 not http at all\r\n\r\n")
        assert sock.recv(1024) == b""  # closed: nothing reached the server, nothing came back
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


def _turn(ended: float | None, prompt: int, completion: int) -> dict:
    from datetime import UTC, datetime
    return {"path": "/v1/chat/completions", "status": 200,
            "ended": datetime.fromtimestamp(ended, UTC).isoformat() if ended else None,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def test_a_turn_the_harness_stop_cut_off_may_be_missing_from_the_store_and_nothing_else():
    stop = 1_000_000.0
    entries = [_turn(stop - 60, 10_240, 64), _turn(stop - 1, 10_420, 20)]  # the 2nd ended as the stop came
    wire, settled = figures(entries), figures(settled_entries(entries, stop))
    assert settled["turns"] == 1 and settled["tokens"]["input"] == 10_240
    lost_last = {"input": 10_240, "output": 64, "cache_read": 0, "turns": 1}  # opencode died before saving it
    kept_last = {"input": 20_660, "output": 84, "cache_read": 0, "turns": 2}
    assert decisive(wire, lost_last) != []  # without the stop's time: two stories
    assert decisive(wire, lost_last, settled) == [] and decisive(wire, kept_last, settled) == []
    # The stop excuses only the cut-off turn: a store short of a settled one, or over the wire, is void.
    short = {"input": 5_000, "output": 64, "cache_read": 0, "turns": 1}
    assert decisive(wire, short, settled) == [
        "input tokens: the store says 5,000, the wire 20,660 (10,240 before the harness's stop)"]
    inflated = {**kept_last, "output": 900}
    assert decisive(wire, inflated, settled) == ["output tokens: the store says 900, the wire 84 (64 before the harness's stop)"]
    # A turn that ended well before the stop settled; one still open at it did not.
    assert len(settled_entries([_turn(stop - 6, 1, 1), _turn(None, 1, 1)], stop)) == 1


def test_a_head_sent_in_parts_past_16k_is_read_and_one_past_the_cap_is_closed(tmp_path: Path):
    """A request head split across sends and longer than h11's 16 KiB default once blinded the
    tap for the connection (later calls relayed, never logged); now it is read, and a head past
    HEAD_CAP ends the connection unrelayed."""
    from harness.sandbox import wirelog

    answer = Answer(text="ok", prompt_tokens=10, completion_tokens=2)
    with FakeOpenAI(reply=lambda body: answer) as fake:
        port = urlsplit(fake.url).port
        log = WireLog(tmp_path / "wire.jsonl")
        bridge = Bridge([port], wire=(port, log))
        try:
            entry = _entry(bridge, port)
            body = json.dumps({"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]})
            head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: {'a' * 20_000}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            sock = socket.create_connection(("127.0.0.1", entry), timeout=10)
            sock.sendall(head[:10_000])
            sock.sendall(head[10_000:] + body.encode())
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
            sock.close()
            assert got.startswith(b"HTTP/1.1 200")
        finally:
            bridge.close()
    # A server that reads any head however long (a sink): only the tap's cap can end it.
    sink = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: [c.recv(1 << 20) for c in [sink.accept()[0]] for _ in range(64)],
                     daemon=True).start()
    bridge = Bridge([sink.getsockname()[1]], wire=(sink.getsockname()[1], log))
    try:
        big = socket.create_connection(("127.0.0.1", _entry(bridge, sink.getsockname()[1])), timeout=10)
        big.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nX-Pad: ")
        try:
            for _ in range(wirelog.HEAD_CAP // 65536 + 2):
                big.sendall(b"a" * 65536)
            closed = big.recv(1024) == b""
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        big.close()
    finally:
        bridge.close()
        sink.close()
    assert closed and log.broken == 1
    entries = read_log(tmp_path / "wire.jsonl")
    assert len(entries) == 1 and (entries[0]["status"], entries[0]["messages"]) == (200, 1)


def _drain(server: socket.socket, count: int, drained: list[int], answer: bytes = b"") -> list[socket.socket]:
    """Accept `count` connections on `server`; each is read to the end (its bytes added to
    `drained`), after `answer` is sent on it once its request head has come."""
    conns: list[socket.socket] = []

    def serve(conn: socket.socket) -> None:
        got = b""
        while b"\r\n\r\n" not in got and (part := conn.recv(65536)):
            got += part
        if answer:
            conn.sendall(answer)
        drained.append(len(got))
        while part := conn.recv(65536):
            drained.append(len(part))

    def accept() -> None:
        for _ in range(count):
            conn = server.accept()[0]
            conns.append(conn)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return conns


UNFINISHED = b'{"model": "m", "messages": [{"role": "user", "content": "'  # a string that never ends


def test_request_bodies_go_through_without_being_held(tmp_path: Path, monkeypatch):
    """Connections each streaming an unfinished 32 MiB JSON body (its bytes inside one string):
    every byte is relayed and none is held (the request is read as it streams), and
    connections past the cap are closed at once."""
    from harness.sandbox import net

    monkeypatch.setattr(net, "MAX_CONNECTIONS", 6)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    drained: list[int] = []
    held = _drain(server, 6, drained)
    log = WireLog(tmp_path / "wire.jsonl", budget=3 << 20)
    bridge = Bridge([port], wire=(port, log))
    clients, head = [], b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n"
    try:
        entry = _entry(bridge, port)
        for _ in range(8):
            clients.append(socket.create_connection(("127.0.0.1", entry), timeout=10))
        for c in clients[:6]:
            c.sendall(head + UNFINISHED)
            for _ in range(16):
                c.sendall(b"x" * 65536)  # 1 MiB each, 6 MiB in all against a 3 MiB budget
        sent = 6 * (len(head) + len(UNFINISHED) + (16 << 16))
        deadline = time.monotonic() + 10
        while sum(drained) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(drained) == sent  # every byte reached the server
        assert bridge.refused == 2
        assert log.peak_held == 0 and log.held == 0  # none of it was kept
    finally:
        for c in [*clients, *held]:
            c.close()
        bridge.close()
        server.close()


def test_plain_answers_held_are_bounded_across_the_run(tmp_path: Path):
    """Plain JSON answers (not streamed) are parsed whole: unfinished ones on six connections
    hold at most the run's budget (the rest counted, not parsed), and give it back at close."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 33554432\r\n\r\n"
              + b"x" * (1 << 20))  # 1 MiB of 32 each, 6 MiB in all against a 3 MiB budget
    drained: list[int] = []
    held = _drain(server, 6, drained, answer)
    log = WireLog(tmp_path / "wire.jsonl", budget=3 << 20)
    bridge = Bridge([port], wire=(port, log))
    clients, got = [], [0] * 6
    try:
        entry = _entry(bridge, port)
        for i in range(6):
            c = socket.create_connection(("127.0.0.1", entry), timeout=10)
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            clients.append(c)
        deadline = time.monotonic() + 10
        while sum(got) < 6 * len(answer) and time.monotonic() < deadline:
            for i, c in enumerate(clients):
                c.settimeout(0.05)
                try:
                    got[i] += len(c.recv(1 << 20))
                except TimeoutError:
                    pass
        assert sum(got) == 6 * len(answer)  # relayed whole, held or not
        assert log.peak_held <= 3 << 20 and log.held > 2 << 20
    finally:
        for c in [*clients, *held]:
            c.close()
        bridge.close()
        server.close()
    assert log.held == 0  # each closed connection gave its bytes back
