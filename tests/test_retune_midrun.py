"""Issue 62: the box gets busy in the middle of a request. Going down, the retune does not wait
for an idle slot that a request decoding at 0.4 tok/s never leaves: the bridge holds new model
connections, cuts the one in flight (marked `cut` in the wire log, no turn), the server is served
again, and the held connection goes through after. Going up, or with no bridge to cut with, it
waits (the timeline says so). And a run whose decode fell says when, to what, and why.

Real sockets throughout: the OpenAI-compatible fake on loopback, the sandbox's real Bridge and
wire log; the stack is a stand-in that records when it is served again (what llama.cpp's restart
does is tested in test_llamacpp_retune*)."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from fakes.openai_server import Answer, FakeOpenAI
from harness.records.record import Probe, RunOutcome
from harness.sandbox.net import Bridge
from harness.sandbox.wirelog import WireLog, figures, read_log
from harness.serving.pace import PaceMonitor, Reading
from harness.serving.retune import Retuner
from harness.stacks import cpu_threads

CORES = math.floor(cpu_threads.usable_cores()[0])
needs_two = pytest.mark.skipif(CORES < 2, reason="a retune down needs two usable cores")


class Stack:
    """Serves again on request: records when, and what the bridge let through meanwhile."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.threads_now = cpu_threads.ThreadChoice(CORES, CORES, 0.0, "test", "all")
        self.calls: list[dict] = []
        self.during = threading.Event()

    def retune(self, unit, env, preset, choice):
        self.during.set()
        seen_before = len(self.fake.seen)
        time.sleep(1.0)  # a restart: a connection opened now must wait for it
        self.calls.append({"threads": choice.threads, "seen_during": len(self.fake.seen) - seen_before})
        self.threads_now = choice
        return choice


def _entry(bridge: Bridge, port: int) -> str:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    bridge.adopt(listener, port)
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def _busy(running: int) -> Reading:
    return Reading(time.monotonic(), 0, 0, running, 0, None, float(CORES), wall=time.time())


def _stream(url: str, out: dict, key: str) -> None:
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": key}]}
    try:
        with httpx.Client(timeout=30) as client, client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            out[key] = b"".join(r.iter_bytes())
    except httpx.HTTPError as exc:
        out[key] = exc


@needs_two
def test_a_retune_down_cuts_the_request_in_flight_and_holds_the_next_until_served_again(tmp_path: Path):
    answers = iter([Answer(stall=True), Answer(text="after the retune", completion_tokens=3)])
    with FakeOpenAI(reply=lambda body: next(answers)) as fake:
        port = urlsplit(fake.url).port
        bridge = Bridge([port], wire=(port, WireLog(tmp_path / "wire.jsonl")))
        stack = Stack(fake)
        pace = PaceMonitor(fake.url, timeline=tmp_path / "pace.jsonl")
        retuner = Retuner(stack, None, None, None, print, net=bridge, running=None)
        retuner.pace = pace
        url, out = _entry(bridge, port), {}
        try:
            first = threading.Thread(target=_stream, args=(url, out, "first"))
            first.start()
            deadline = time.monotonic() + 10
            while not fake.seen and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(fake.seen) == 1  # in flight, stalled: it holds the slot
            retuner(_busy(running=1))
            assert stack.calls == []  # one reading is not yet a change (confirm_down = 2)
            # the next call, sent while the server is served again: held, then answered
            second = threading.Thread(target=lambda: (stack.during.wait(10), _stream(url, out, "second")))
            second.start()
            retuner(_busy(running=1))
            first.join(10)
            second.join(20)
        finally:
            bridge.close()
    assert stack.calls == [{"threads": 1, "seen_during": 0}]  # nothing reached the server mid-restart
    assert retuner.cuts == 1 and len(retuner.done) == 1
    assert not isinstance(out["second"], Exception) and b"retune" in out["second"] and b"[DONE]" in out["second"]
    assert isinstance(out["first"], Exception) or b"[DONE]" not in out["first"]  # the cut call never finished
    entries = read_log(tmp_path / "wire.jsonl")
    cut = [e for e in entries if e.get("cut")]
    assert len(cut) == 1 and cut[0]["incomplete"] is True
    assert figures(entries)["turns"] == 1 and figures(entries)["cut"] == 1  # the cut call is no turn
    lines = [json.loads(line) for line in (tmp_path / "pace.jsonl").read_text().splitlines()]
    assert [ln["retune"] for ln in lines if "retune" in ln] == [f"{CORES} -> 1"] and lines[-1]["cut"] is True


@needs_two
def test_without_a_bridge_it_waits_for_an_idle_slot_and_says_so(tmp_path: Path):
    with FakeOpenAI() as fake:
        stack = Stack(fake)
        pace = PaceMonitor(fake.url, timeline=tmp_path / "pace.jsonl")
        retuner = Retuner(stack, None, None, None, print, net=None)
        retuner.pace = pace
        for _ in range(4):
            retuner(_busy(running=1))
        assert stack.calls == []
        held = [json.loads(line) for line in (tmp_path / "pace.jsonl").read_text().splitlines()]
        assert len(held) == 1 and "waits for an idle slot" in held[0]["held"]
        retuner(_busy(running=0))  # the slot freed: served again now, nothing cut
    assert [c["threads"] for c in stack.calls] == [1] and retuner.cuts == 0


@needs_two
def test_going_up_never_cuts_and_retunes_are_spaced(tmp_path: Path):
    with FakeOpenAI() as fake:
        stack = Stack(fake)
        stack.threads_now = cpu_threads.ThreadChoice(1, CORES, 1.0, "test", "one")

        class Net:  # must never be asked: an up-switch waits for an idle slot
            def hold(self):
                raise AssertionError("held")
            cut = release = hold

        retuner = Retuner(stack, None, None, None, print, net=Net(), confirm_up=2, min_gap_s=3600)
        idle = Reading(time.monotonic(), 0, 0, 1, 0, None, 0.0)
        for _ in range(3):
            retuner(idle)  # a request running: waits
        assert stack.calls == []
        idle.running = 0
        retuner(idle)
        assert [c["threads"] for c in stack.calls] == [CORES]
        stack.threads_now = cpu_threads.ThreadChoice(1, CORES, 1.0, "test", "one")
        for _ in range(4):
            retuner(idle)
        assert len(stack.calls) == 1  # min_gap_s: one retune an hour at most here


# -- the fall, named -----------------------------------------------------------------------------

def _reading(t: float, generated: float, running: int, busy: float, threads: int) -> Reading:
    return Reading(t, 0, generated, running, 0, None, busy, wall=1_765_101_270.0 + t, threads=threads)


def _fed(monitor: PaceMonitor, readings: list[Reading]) -> PaceMonitor:
    for reading in readings:
        before = monitor.readings[-1] if monitor.readings else None
        if before is not None:
            reading.decode_tps = (reading.generated_total - before.generated_total) / (reading.t - before.t)
        monitor.readings.append(reading)
    return monitor


def test_a_decode_that_fell_is_named_with_when_what_others_wanted_and_the_threads():
    monitor = PaceMonitor("http://127.0.0.1:9", probe=Probe(decode_short_tps=15.4))
    t, gen, readings = 0.0, 0.0, []
    for _ in range(4):  # 15 tok/s while idle
        t, gen = t + 5, gen + 75
        readings.append(_reading(t, gen, 1, 0.1, 2))
    for _ in range(5):  # then 0.4 tok/s while a busy loop wants a core
        t, gen = t + 5, gen + 2
        readings.append(_reading(t, gen, 1, 1.0, 2))
    text = _fed(monitor, readings).fall()
    assert text == "decode fell from 15.4 to 0.40 tok/s at 09:54:55 UTC while other processes wanted 1.0 core; threads 2 kept"
    monitor.notes.append({"at_wall": readings[-1].wall, "retune": "2 -> 1"})
    assert _fed(PaceMonitor("http://127.0.0.1:9", probe=Probe(decode_short_tps=15.4)), readings).fall() is not None
    monitor_ok = _fed(PaceMonitor("http://127.0.0.1:9", probe=Probe(decode_short_tps=15.4)), readings[:4])
    assert monitor_ok.fall() is None  # it held: nothing to say
    assert "threads 2 -> 1 at" in monitor.fall()


def test_two_slow_readings_or_an_idle_server_are_no_fall():
    """Below half for fewer than FALL_READINGS readings (a long prefill between two answers),
    or nothing running (opencode running a tool): not a fall."""
    monitor = PaceMonitor("http://127.0.0.1:9", probe=Probe(decode_short_tps=15.4))
    readings, t, gen = [], 0.0, 0.0
    for running, rate in ((1, 15), (1, 0.4), (1, 0.4), (1, 15), (0, 0), (0, 0), (0, 0), (1, 14)):
        t, gen = t + 5, gen + rate * 5
        readings.append(_reading(t, gen, running, 0.0, 2))
    assert _fed(monitor, readings).fall() is None


def test_the_fall_is_one_line_on_the_record():
    outcome = RunOutcome(pace="decode fell\nfrom 15.4\x1b[2J to 0.4")
    assert "\n" not in outcome.pace and "\x1b" not in json.dumps(outcome.model_dump())


def test_the_timeline_is_bounded(tmp_path: Path):
    with FakeOpenAI() as fake:
        monitor = PaceMonitor(fake.url, timeline=tmp_path / "pace.jsonl", max_readings=5)
        for _ in range(2):
            monitor.read()
        for n in range(100):  # a retuner gone wild (it is bounded too): the file still stops
            monitor.note({"retune": f"{n}"})
    assert len((tmp_path / "pace.jsonl").read_text().splitlines()) == 5 + 50
    assert os.path.getsize(tmp_path / "pace.jsonl") < 64 << 10


# -- the real opencode sends a cut call again ------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_real_opencode_sends_a_call_the_bridge_cut_again_and_finishes(tmp_path: Path):
    """What the mid-request retune stands on: opencode (the pinned CLI, headless) meets a stream
    the bridge cut and sends the call again on its own, and its run ends ok on the answer."""
    import subprocess

    from conftest import OPENCODE
    from harness.opencode.config import isolated_env, provider_config, write_provider_file
    from harness.stacks.base import Unit

    cut_sent = threading.Event()

    def reply(body: dict) -> Answer:
        if not cut_sent.is_set():
            return Answer(stall=True)  # the first call decodes "forever": the retune cuts it
        return Answer(text="Done after the retune.", completion_tokens=5)

    with FakeOpenAI(reply=reply) as fake:
        port = urlsplit(fake.url).port
        bridge = Bridge([port], wire=(port, WireLog(tmp_path / "wire.jsonl")))
        through = _entry(bridge, port)
        unit = Unit("vot-test", "replay", "test", "test", through, "fake-model", 65536)
        config = provider_config(unit, reasoning_parser=None)
        config["provider"]["vot"]["models"] = {"fake-model": config["provider"]["vot"]["models"].pop("fake-model")}
        provider = write_provider_file(config, tmp_path / "provider.json")
        env = isolated_env(tmp_path / "home", provider, None)
        work = tmp_path / "work"
        work.mkdir()
        proc = subprocess.Popen([str(OPENCODE), "run", "--model", "vot/fake-model", "--format", "json",
                                 "say done"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            # the agent's own call (its tools sent) in flight, not only opencode's title call
            while not any(s.body.get("stream") and s.body.get("tools") for s in fake.seen) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)
            cut_sent.set()
            stalled = [s for s in fake.seen if s.body.get("stream")]
            bridge.hold()
            assert bridge.cut() >= 1
            time.sleep(1.0)  # the server "restarts"
            bridge.release()
            out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                proc.kill()
            bridge.close()
    chats = [s for s in fake.seen if s.body.get("stream")]
    assert proc.returncode == 0, err[-3000:]
    # The agent's call in flight when the bridge cut (its tools sent; opencode's title call may
    # have been cut beside it, and is not sent again: a title is best-effort) is sent again.
    agent = [c for c in stalled if c.body.get("tools")]
    assert len(agent) == 1, [sorted(c.body) for c in stalled]
    again = [c for c in chats if c not in stalled and c.messages == agent[0].messages]
    assert len(again) == 1, [len(c.messages) for c in chats]
    assert "Done after the retune." in out.replace("\\n", " ") or "retune" in out, out[-2000:]
    entries = read_log(tmp_path / "wire.jsonl")
    assert sum(1 for e in entries if e.get("cut")) == len(stalled)  # every call cut is marked, none a turn
    assert figures(entries)["turns"] == len(chats) - len(stalled)


def test_llama_cpp_decode_is_read_from_its_decode_calls_not_its_end_of_request_counter():
    """The demo beside a busy loop (issue 62) read "decode fell to 0.00" on an ok run: llama.cpp
    adds to tokens_predicted_total only when a request ends. Its n_decode_total counts as it goes;
    a prefill (prompt tokens processed) is no decode and never a fall."""
    from harness.serving.pace import _decode_rate

    before = Reading(0.0, 500, 800, 1, 0, None, 0.0, decode_steps=1000)
    mid = Reading(5.0, 500, 800, 1, 0, None, 0.0, decode_steps=1050)  # 50 calls, no request ended
    assert _decode_rate(before, mid, 1.0) == 10.0
    assert _decode_rate(before, mid, 2.0) == 20.0  # two slots decoded in each call
    restarted = Reading(5.0, 0, 0, 1, 0, None, 0.0, decode_steps=3)  # a retune restarted the server
    assert _decode_rate(before, restarted, 1.0) is None
    vllm = Reading(5.0, 500, 850, 1, 0, None, 0.0)
    assert _decode_rate(Reading(0.0, 500, 800, 1, 0, None, 0.0), vllm, None) == 10.0

    monitor = PaceMonitor("http://127.0.0.1:9", probe=Probe(decode_short_tps=15.0))
    t, readings = 0.0, []
    for n in range(6):  # a long answer at 12 tok/s: the end-of-request counter never moves
        t += 5
        readings.append(Reading(t, 0, 0, 1, 0, None, 0.0, wall=t, threads=2, decode_steps=60.0 * (n + 1)))
    for n in range(5):  # then a long prefill: its decode calls are few, it is no fall
        t += 5
        r = Reading(t, 0, 0, 1, 0, None, 1.0, wall=t, threads=2, decode_steps=360.0 + n, prefilling=True)
        readings.append(r)
    for before, now in zip(readings, readings[1:]):
        now.decode_tps = _decode_rate(before, now, 1.0)
        monitor.readings.append(now)
    assert monitor.fall() is None
