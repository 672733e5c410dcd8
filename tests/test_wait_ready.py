"""wait_ready's schedule against a loopback server that lists the model only from its Nth ask:
the pause between asks starts short and doubles up to `poll_s`, so a server that is up at once is
seen at once and a slow one is not asked more than once a `poll_s`."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.errors import StackError
from harness.run.unitlog import wait_ready
from harness.stacks.base import Unit


class NoProblem:
    """The one thing wait_ready asks of its collector: nothing fatal was seen."""

    def raise_if_problem(self) -> None:
        return None


def serve_ready_from(n: int):
    """A /v1/models server that answers 503 to its first n-1 asks; returns (server, ask times)."""
    asks: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asks.append(time.monotonic())
            if len(asks) < n:
                self.send_response(503)
                self.end_headers()
                return
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asks


def unit_at(server) -> Unit:
    return Unit(name="vot-m", stack="replay", environment="replay", preset="m",
                base_url=f"http://127.0.0.1:{server.server_address[1]}", served_name="m", max_model_len=None)


def test_a_server_up_soon_is_seen_well_before_one_poll():
    server, asks = serve_ready_from(4)
    try:
        started = time.monotonic()
        wait_ready(unit_at(server), 60, NoProblem(), poll_s=5.0)
        took = time.monotonic() - started
    finally:
        server.shutdown()
    # Asked at 0, 0.1, 0.3, 0.7 s: a fixed 5 s pause would have taken 15 s.
    assert len(asks) == 4 and took < 5.0, (len(asks), took)


def test_the_pause_doubles_and_stops_at_poll_s():
    server, asks = serve_ready_from(7)
    try:
        wait_ready(unit_at(server), 60, NoProblem(), poll_s=0.4)
    finally:
        server.shutdown()
    gaps = [b - a for a, b in zip(asks, asks[1:])]
    # A pause is never shorter than its turn in 0.1, 0.2, 0.4, 0.4, ... (sleep only runs long).
    floors = [min(0.1 * 2 ** i, 0.4) for i in range(len(gaps))]
    assert len(gaps) == 6 and all(g >= f - 0.01 for g, f in zip(gaps, floors)), gaps


def test_a_server_that_never_lists_the_model_times_out():
    server, asks = serve_ready_from(10**6)
    try:
        with pytest.raises(StackError, match="did not list 'm'"):
            wait_ready(unit_at(server), 0.5, NoProblem(), poll_s=0.2)
    finally:
        server.shutdown()
    assert 2 <= len(asks) <= 8
