"""The engine and version on the record come from what the server says of itself: vLLM's
`/version`, llama.cpp's `/props` build, the replay stack's owner; never a guess."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.serving.engine import engine_of, identify


def _serve(routes: dict[str, object]):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = routes.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}


@pytest.mark.parametrize(("routes", "name", "version", "source"), [
    ({"/v1/models": MODELS, "/version": {"version": "0.32.0"}}, "vllm", "0.32.0", "/version"),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "llamacpp"}]},
      "/props": {"build_info": "b6123-4b2f0c1"}}, "llama.cpp", "b6123-4b2f0c1", "/props"),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "llms-benchmark-replay"}]},
      "/version": {"version": "9.9.9"}}, "replay", None, "/v1/models"),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}}, "someone", None, None),
    ({}, "unknown", None, None),
])
def test_identify_reads_the_server_s_own_words(routes, name, version, source):
    server = _serve(routes)
    try:
        info = identify(f"http://127.0.0.1:{server.server_address[1]}", image="img:1", image_digest="sha256:x")
    finally:
        server.shutdown()
    assert (info.name, info.version, info.read_from) == (name, version, source)
    assert info.describe().startswith(f"{name} {version or '(version unknown)'}")
    assert info.describe().endswith("image img:1@sha256:x")


@pytest.mark.parametrize("identity", [
    {"models": []}, {"models": {"data": "x"}}, {"version": "0.1"}, {"props": ["b1"]}, {"models": {"data": [None]}},
])
def test_odd_answers_are_unknown_not_a_crash(identity):
    assert engine_of(identity).version is None


def test_an_unreachable_server_is_unknown():
    assert identify("http://127.0.0.1:9").name == "unknown"
