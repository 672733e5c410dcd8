"""Retry-After read once (harness/wire/retry_after.py: seconds or an HTTP date) and the one
retry policy on tenacity (harness/wire/retry.py): bounded in attempts and in seconds of
waiting, each retry counted, anything else raised at once. The sleep is injected."""

from __future__ import annotations

from email.utils import format_datetime
from datetime import UTC, datetime

import httpx
import pytest

from harness.fitness.config import RetryCfg
from harness.fitness.retry import Tally
from harness.wire.retry import RETRIED, Busy, Retrier, Steady, retry_after
from harness.wire.retry_after import from_headers, seconds

NOW = 1_800_000_000.0


def test_both_forms_of_retry_after() -> None:
    assert seconds("7") == 7.0 and seconds(" 2.5 ") == 2.5 and seconds("-3") == 0.0
    date = format_datetime(datetime.fromtimestamp(NOW + 30, UTC), usegmt=True)
    assert seconds(date, now=NOW) == pytest.approx(30.0)
    assert seconds(date.replace("GMT", "-0000"), now=NOW) == pytest.approx(30.0)  # no zone: GMT, not local time
    assert seconds(date, now=NOW + 60) == 0.0  # a date past
    assert seconds(None) is None and seconds("") is None and seconds("soon") is None and seconds("nan") is None
    assert from_headers(httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"})) == 0.25
    assert from_headers(httpx.Headers({"retry-after-ms": "x", "Retry-After": "9"})) == 9.0


def test_the_policy_clamps_and_defaults() -> None:
    cfg = RetryCfg(retry_after_min_s=1, retry_after_max_s=120, retry_after_default_s=15)
    assert [retry_after(h, cfg) for h in ("0", "100000", None, "soon", "30")] == [1, 120, 15, 15, 30]


def _run(retrier: Retrier, outcomes: list) -> tuple[object, int]:
    calls = 0
    for attempt in retrier:
        with attempt:
            calls += 1
            got = outcomes.pop(0)
            if isinstance(got, BaseException):
                raise got
    return got, calls


def test_retried_until_an_answer_each_retry_counted() -> None:
    waits: list[float] = []
    tally = Tally()
    retrier = Retrier(RetryCfg(attempts=5, retry_after_min_s=0, retry_after_default_s=3), waits.append,
                      budget_s=100, tally=tally, transient=lambda exc: "connect" if isinstance(exc, httpx.ConnectError) else None)
    got, calls = _run(retrier, [Busy(429, "2"), httpx.ConnectError("refused"), Busy(503, None), "answer"])
    assert (got, calls, waits) == ("answer", 4, [2.0, 3.0, 3.0])
    assert tally.doc()["by_status"] == {"429": 1, "connect": 1, "503": 1} and tally.retries == 3
    assert tally.gave_up == 0 and (retrier.attempt, retrier.waited) == (4, 8.0)


def test_bounded_in_attempts_and_in_seconds_then_the_last_failure_is_raised() -> None:
    waits: list[float] = []
    tally = Tally()
    retrier = Retrier(RetryCfg(attempts=3, retry_after_min_s=0), waits.append, budget_s=100, tally=tally)
    with pytest.raises(Busy) as raised:
        _run(retrier, [Busy(429, "1"), Busy(429, "1"), Busy(429, "1", response="last"), "never"])
    assert raised.value.response == "last" and waits == [1.0, 1.0] and tally.gave_up == 1

    waits.clear()
    retrier = Retrier(RetryCfg(attempts=8, retry_after_min_s=0), waits.append, budget_s=10, tally=tally)
    with pytest.raises(Busy):
        _run(retrier, [Busy(503, "4"), Busy(503, "4"), Busy(503, "4"), "never"])
    assert waits == [4.0, 4.0] and retrier.attempt == 3 and tally.gave_up == 2  # a third 4 s would pass 10 s


def test_anything_else_is_raised_at_once() -> None:
    waits: list[float] = []
    retrier = Retrier(RetryCfg(), waits.append, budget_s=100)
    with pytest.raises(httpx.ReadTimeout):
        _run(retrier, [httpx.ReadTimeout("slow"), "never"])
    assert waits == [] and 429 in RETRIED and 502 in RETRIED and 404 not in RETRIED


def test_a_steady_policy_for_a_server_that_sends_no_retry_after() -> None:
    waits: list[float] = []
    retrier = Retrier(Steady(attempts=3, wait_s=1.0), waits.append,
                      transient=lambda exc: "error" if isinstance(exc, ValueError) else None)
    with pytest.raises(ValueError, match="third"):
        _run(retrier, [ValueError("first"), Busy(502, "60"), ValueError("third")])
    assert waits == [1.0, 1.0]  # a Retry-After of 60 s is clamped to the steady second


def test_the_azure_public_ip_lookup_asks_three_times_a_second_apart(tmp_path, monkeypatch) -> None:
    """harness/stacks/azure.py's lookup on the policy: a 503 and a body that is no IP are asked
    again, the third answer is used; three failures are one clear preflight error."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    pytest.importorskip("azure.identity")
    from harness.errors import PreflightError
    from harness.stacks.azure import AzureStack
    from harness.stacks.azure_arm import AzureSettings

    answers: list[tuple[int, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, body = answers.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stack = AzureStack(tmp_path, AzureSettings(public_ip_url=f"http://127.0.0.1:{server.server_port}/ip"))
        env = SimpleNamespace(path=tmp_path / "env.yaml")
        answers[:] = [(503, b"busy"), (200, b"not an address"), (200, b"203.0.113.7\n")]
        assert stack._caller_ip(env) == "203.0.113.7" and waits == [1.0, 1.0] and not answers
        answers[:] = [(503, b"busy")] * 3
        with pytest.raises(PreflightError, match=r"public IP .*\(HTTP 503\)"):
            stack._caller_ip(env)
        server.shutdown()
    assert not answers and waits == [1.0, 1.0, 1.0, 1.0]
