"""A stall named by what stalled (issue 47): the server's own progress, read from a loopback
server that speaks the llama.cpp /metrics exposition and from its trace-level log."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from harness.records.record import Probe
from harness.serving import pace as pace_mod
from harness.serving.pace import PaceMonitor
from harness.stages.agent import _smoke_fix


class _Counters:
    prompt = 0
    predicted = 0
    processing = 0
    deferred = 0


def _handler(counters: _Counters):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = (
                "# TYPE llamacpp:prompt_tokens_total counter\n"
                f"llamacpp:prompt_tokens_total {counters.prompt}\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {counters.predicted}\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                f"llamacpp:requests_processing {counters.processing}\n"
                "# TYPE llamacpp:requests_deferred gauge\n"
                f"llamacpp:requests_deferred {counters.deferred}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    return Handler


@pytest.fixture
def server():
    counters = _Counters()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(counters))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", counters
    httpd.shutdown()
    httpd.server_close()


PROBE = Probe(decode_short_tps=26.9, prefill_tps=71.8)


def _progress(log, n, progress):
    with open(log, "a") as f:
        f.write(f"slot update_slots: id  0 | task 3 | prompt processing progress, n_tokens = {n}, "
                f"batch.n_tokens = 512, progress = {progress:.6f}\n")


def _monitor(url, log, probe=PROBE):
    return PaceMonitor(url, log_path=log, probe=probe, reference=Probe(prefill_tps=80.0, decode_short_tps=30.0))


def test_a_slow_prefill_is_named_with_its_pace_and_the_box(server, tmp_path):
    url, counters = server
    log = tmp_path / "unit.log"
    log.write_text("earlier lines of the log\n")
    _progress(log, 9999, 0.9)  # before the monitor started: not this window's
    mon = _monitor(url, log)
    mon.read()
    counters.processing = 1
    _progress(log, 2, 0.0004)
    mon.read()
    _progress(log, 6, 0.0012)  # 6 prompt tokens over the window: far below 71.8 tok/s
    d = mon.explain(300)
    assert d.cause == "slow", d
    assert "the server was prefilling: 6 prompt tokens" in d.text
    assert "the probe measured 71.8" in d.text and "best here 80" in d.text
    assert "too busy or too slow for this preset" in d.text
    assert "0% of its prompt done" in d.text


def test_a_prefill_at_its_pace_is_not_blamed_on_the_box(server, tmp_path):
    url, counters = server
    log = tmp_path / "unit.log"
    log.write_text("")
    mon = _monitor(url, log, probe=Probe(prefill_tps=0.001, decode_short_tps=0.001))
    mon.reference = None
    mon.read()
    counters.processing = 1
    _progress(log, 512, 0.1)
    d = mon.explain(300)
    assert d.cause == "prefill" and "512 prompt tokens" in d.text and "too busy" not in d.text


def test_a_new_prompt_counts_from_its_own_start(server, tmp_path):
    url, counters = server
    log = tmp_path / "unit.log"
    log.write_text("")
    mon = _monitor(url, log)
    mon.read()
    _progress(log, 2048, 1.0)  # one prompt done
    _progress(log, 512, 0.5)   # the next one, half way
    mon.read()
    assert mon.readings[-1].prefilled == 2048 + 512


def test_decode_counted_from_the_servers_counter(server, tmp_path):
    url, counters = server
    mon = _monitor(url, None)
    mon.read()
    counters.predicted, counters.processing = 3, 1  # readings >= 0.5 s apart: <= 6 tok/s
    d = mon.explain(300)
    assert d.cause == "slow" and "generated 3 tokens" in d.text and "the probe measured 26.9" in d.text


def test_an_idle_server_says_opencode_sent_nothing(server, tmp_path):
    url, _ = server
    mon = _monitor(url, None)
    mon.read()
    d = mon.explain(300)
    assert d.cause == "idle" and "opencode sent it nothing" in d.text


def test_a_request_held_without_progress_on_a_free_box_is_the_server(server, tmp_path):
    url, counters = server
    mon = _monitor(url, None)
    counters.deferred = 1  # a request waiting: held, nothing processed
    mon.read()
    d = mon.explain(300)
    if d.cause == "slow":  # this box was busy with something else meanwhile
        assert "too busy" in d.text
    else:
        assert d.cause == "stuck" and "the box is not the cause" in d.text


def test_an_unreadable_server_is_said(tmp_path):
    mon = PaceMonitor("http://127.0.0.1:9", log_path=None)
    mon.read()
    d = mon.explain(300)
    assert d.cause in ("idle", "unknown")


def test_the_best_pace_is_remembered_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pace_mod.reference("p cpu") is None
    pace_mod.remember("p cpu", Probe(decode_short_tps=20.0, prefill_tps=70.0))
    best = pace_mod.remember("p cpu", Probe(decode_short_tps=3.0, prefill_tps=90.0))
    assert (best.decode_short_tps, best.prefill_tps) == (20.0, 90.0)
    assert pace_mod.reference("p cpu").prefill_tps == 90.0
    assert pace_mod.reference("other") is None


def _result(texts):
    return SimpleNamespace(texts=texts, tool_uses=[])


def test_the_parser_is_blamed_only_on_a_parsers_symptom():
    what, fix = _smoke_fix(_result(['<tool_call>\n{"name": "bash", "arguments": {"command": "date"}}']), slow=False)
    assert "no parser turned into a call" in what and "tool-call parser" in fix
    what, fix = _smoke_fix(_result(['{"name": "bash", "arguments": {}}']), slow=False)
    assert "tool-call parser" in fix
    what, fix = _smoke_fix(_result(["The date is Saturday."]), slow=False)
    assert "answered in prose" in what and "parser" not in fix
    what, fix = _smoke_fix(_result([]), slow=True)
    assert "too busy or too slow" in what and "free the machine" in fix and "parser" not in fix
    # A slow box is the cause even when the model wrote something call-like meanwhile.
    what, fix = _smoke_fix(_result(["<tool_call>"]), slow=True)
    assert "parser" not in fix


def _launch(prefill, decode, cap_minutes=10):
    rec = SimpleNamespace(probe=Probe(prefill_tps=prefill, decode_short_tps=decode), serving_config={"threads": "1: t"})
    ctx = SimpleNamespace(stall_floor_s=None,
                          pf=SimpleNamespace(mission=SimpleNamespace(manifest=SimpleNamespace(
                              time_cap_minutes=cap_minutes))))
    return rec, ctx


def test_stall_limits_follow_the_probed_pace():
    from harness.opencode.runner import Limits
    from harness.stages.agent import paced
    from harness.stages.serving import fits_smoke

    rec, ctx = _launch(prefill=71.8, decode=26.9)
    fits_smoke(rec, ctx)  # an idle box: ~89 s for the first turn
    assert paced(Limits(time_cap_s=600, stall_s=300), ctx).stall_s == 300
    rec, ctx = _launch(prefill=25.0, decode=8.0)  # a busy box: ~256 s, within half of 600
    fits_smoke(rec, ctx)
    limits = paced(Limits(time_cap_s=600, stall_s=300), ctx)
    assert limits.stall_s == pytest.approx(1.5 * (6000 / 25 + 128 / 8)) and limits.time_cap_s == 600
    assert paced(Limits(time_cap_s=200, stall_s=60), ctx).stall_s == 200  # never past the cap


def test_a_pace_that_cannot_fit_the_mission_is_refused_before_the_smoke():
    from harness.stages.serving import TooSlowForMission, fits_smoke

    rec, ctx = _launch(prefill=0.6, decode=0.8)
    with pytest.raises(TooSlowForMission) as exc:
        fits_smoke(rec, ctx)
    assert "prefill 0.6 tok/s" in exc.value.message and "too busy or too slow" in exc.value.message
    assert "free the machine" in exc.value.fix
    rec, ctx = _launch(prefill=None, decode=None)
    fits_smoke(rec, ctx)  # a probe without figures refuses nothing
    assert ctx.stall_floor_s is None
