"""The replay server's timed mode: tokens on a known schedule, truthful usage and /metrics,
scripting for tests. Timing bounds are generous (a loaded 2-core machine): a token can be
late, never early; precision is measured by bench/load_accuracy.py, not here."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import httpx
import pytest
from timed_replay import MODEL, make_timed  # noqa: F401 - the fixture

from harness.load.client import CHAT_PATH, StreamClient, chat_payload
from harness.load.metrics import parse, scrape
from harness.replay.timed_state import Config
from harness.replay.timed_wire import count_words, schedule

SLACK = 0.25  # how late a loaded machine may make a token, in seconds


def stream(url: str, prompt: str, max_tokens: int, model: str = MODEL, kernel_stamps: bool = True, **extra):
    async def go():
        client = StreamClient(url, kernel_stamps=kernel_stamps)
        try:
            return await client.stream(CHAT_PATH, {**chat_payload(model, prompt, max_tokens), **extra})
        finally:
            await client.aclose()

    return asyncio.run(go())


def many(url: str, prompts: list[str], max_tokens: int):
    async def go():
        client = StreamClient(url)
        try:
            return await asyncio.gather(*(client.stream(CHAT_PATH, chat_payload(MODEL, p, max_tokens))
                                          for p in prompts))
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_tokens_arrive_on_schedule_with_truthful_usage(make_timed) -> None:
    server = make_timed("--ttft", "0.2", "--itl", "0.03")
    prompt = "[tag-one] count these six words please"
    r = stream(server.url, prompt, 10)
    assert r.ok and r.status == 200 and r.finish_reason == "length"
    assert r.prompt_tokens == 6 and r.completion_tokens == 10 and r.chunks == 10
    assert 0.2 <= r.ttft_s < 0.2 + SLACK
    # the last token is due 0.2 + 9 * 0.03 after admission: never earlier
    assert (r.token_ns[-1] - r.start_ns) / 1e9 >= 0.2 + 9 * 0.03 - 0.002
    assert sum(r.itl_s()) / 9 == pytest.approx(0.03, abs=0.015)
    # the same on an asyncio transport (TLS and non-Linux systems), stamped at data_received
    plain = stream(server.url, "[tag-two] x", 10, kernel_stamps=False)
    assert plain.ok and plain.chunks == 10 and 0.2 <= plain.ttft_s < 0.2 + SLACK
    assert (plain.token_ns[-1] - plain.start_ns) / 1e9 >= 0.2 + 9 * 0.03 - 0.002
    line = server.log(at_least=2)[0]
    assert line["tag"] == "tag-one" and line["usage"] == {"prompt_tokens": 6, "completion_tokens": 10,
                                                          "total_tokens": 16}
    assert line["ttft_s"] == 0.2 and line["itl_mean_s"] == 0.03 and line["tokens_sent"] == 10
    # the server's clock is the client's (CLOCK_MONOTONIC): sent, then received, then written, then read
    assert r.start_ns / 1e9 <= line["received_mono"] + 0.001
    assert line["first_token_mono"] - line["received_mono"] >= 0.2
    assert abs(r.token_ns[0] / 1e9 - line["first_token_mono"]) < 0.05
    assert abs(r.token_ns[-1] / 1e9 - line["last_token_mono"]) < 0.05
    snap = scrape(server.url)
    assert snap.server == "vllm" and snap.prompt_tokens_total == 6 + 2 and snap.generation_tokens_total == 20
    assert snap.running == 0 and snap.waiting == 0 and snap.kv_usage == 0


def test_sse_shape_role_first_then_tokens_usage_done(make_timed) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.005")
    body = {**chat_payload(MODEL, "a b c", 3)}
    with httpx.stream("POST", f"{server.url}{CHAT_PATH}", json=body, timeout=10) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:-1]]
    assert len(contents) == 3 and all(c.strip() for c in contents)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3
    assert len({e["id"] for e in events}) == 1


def test_non_streaming_and_text_completions_count_usage(make_timed) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.001")
    chat = httpx.post(f"{server.url}/v1/chat/completions", timeout=10,
                      json={"model": MODEL, "messages": [{"role": "system", "content": "be brief"},
                                                         {"role": "user", "content": "one two three"}],
                            "max_completion_tokens": 5}).json()
    assert chat["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    assert len(chat["choices"][0]["message"]["content"].split()) == 5
    text = httpx.post(f"{server.url}/v1/completions", timeout=10,
                      json={"model": MODEL, "prompt": "alpha beta", "max_tokens": 4}).json()
    assert text["usage"]["prompt_tokens"] == 2 and text["usage"]["completion_tokens"] == 4
    assert httpx.post(f"{server.url}/v1/chat/completions", json={"model": "other", "messages": [
        {"role": "user", "content": "x"}]}, timeout=5).status_code == 404
    assert httpx.post(f"{server.url}/v1/chat/completions", json={"model": MODEL, "max_tokens": 0, "messages": [
        {"role": "user", "content": "x"}]}, timeout=5).status_code == 400
    assert httpx.get(f"{server.url}/version", timeout=5).json()["version"].startswith("replay-timed")


def test_many_concurrent_streams_and_the_running_gauge(make_timed) -> None:
    server = make_timed("--ttft", "0.3", "--itl", "0.02")
    seen: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < 3:
            snap = scrape(server.url)
            if snap and snap.running:
                seen.append(snap.running)
            time.sleep(0.1)

    thread = threading.Thread(target=watch)
    thread.start()
    results = many(server.url, [f"[s{i}] w w w" for i in range(32)], 40)
    thread.join()
    assert all(r.ok and r.completion_tokens == 40 and r.chunks == 40 for r in results)
    assert all(r.ttft_s >= 0.3 for r in results)
    assert max(seen) == 32  # every stream counted while it ran
    snap = scrape(server.url)
    assert snap.running == 0 and snap.generation_tokens_total == 32 * 40 and snap.prompt_tokens_total == 32 * 4
    assert server.stats()["token_lateness"]["n"] == 32 * 39


def test_max_running_queues_the_rest_as_waiting(make_timed) -> None:
    server = make_timed("--ttft", "0.4", "--itl", "0.01", "--max-running", "2", "--kv-tokens", "100")
    box: list = []
    thread = threading.Thread(target=lambda: box.append(many(server.url, [f"[q{i}] a b c d" for i in range(4)], 10)))
    thread.start()
    deadline = time.monotonic() + 5
    snap = None
    while time.monotonic() < deadline:
        snap = scrape(server.url)
        if snap and snap.running == 2 and snap.waiting == 2:
            break
        time.sleep(0.05)
    thread.join()
    assert snap.running == 2 and snap.waiting == 2
    assert 0.1 <= snap.kv_usage <= 0.3  # 2 running x (5 prompt + up to 10 generated) of 100 tokens
    results = box[0]
    assert all(r.ok for r in results)
    queued = sorted(line["queue_s"] for line in server.log(at_least=len(results)))
    assert queued[:2] == pytest.approx([0, 0], abs=0.05)
    assert min(queued[2:]) >= 0.4  # they waited for a running request to finish
    assert sorted(r.ttft_s for r in results)[-1] >= 0.8


def test_scripted_metrics_preemptions_and_extras(make_timed) -> None:
    server = make_timed("--preempt-every", "2", "--ttft", "0.01", "--itl", "0.001")
    server.script(preemptions=3, waiting=5, running=1, kv_usage=0.42)
    snap = scrape(server.url)
    assert snap.preemptions_total == 3 and snap.waiting == 5 and snap.running == 1 and snap.kv_usage == 0.42
    server.script(waiting=0, running=0, kv_usage=None)
    many(server.url, [f"[p{i}] x" for i in range(5)], 3)
    preempted = [line for line in server.log(at_least=5) if line["preempted"]]
    assert len(preempted) == 2  # the 2nd and 4th requests
    snap = scrape(server.url)
    assert snap.preemptions_total == 3 + 2 and snap.busy == 0 and snap.kv_usage == 0


@pytest.mark.parametrize("flavor", ["vllm-legacy", "llamacpp"])
def test_metric_flavors_parse_to_the_same_figures(make_timed, flavor: str) -> None:
    server = make_timed("--metrics-flavor", flavor, "--ttft", "0.01", "--itl", "0.001", "--engines", "2")
    many(server.url, [f"[f{i}] one two" for i in range(3)], 4)
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    snap = parse(text)
    assert snap.server == ("llamacpp" if flavor == "llamacpp" else "vllm")
    assert snap.prompt_tokens_total == 9 and snap.generation_tokens_total == 12
    assert snap.running == 0 and snap.waiting == 0
    if flavor == "vllm-legacy":
        assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" not in text
        assert snap.prefix_cache_queries_total == 9 and snap.prefix_cache_hits_total == 0
        assert 'engine="1"' in text  # two label sets, summed
    else:
        assert "llamacpp:tokens_predicted_total" in text and snap.kv_usage == 0


def test_seeded_jitter_is_reproducible_and_measured(make_timed) -> None:
    cfg = Config(model=MODEL, ttft=0.1, itl=0.02, jitter=0.008, seed=7)
    assert schedule(cfg, 3, 20) == schedule(cfg, 3, 20) != schedule(cfg, 4, 20)
    gaps = [b - a for a, b in zip(schedule(cfg, 3, 20), schedule(cfg, 3, 20)[1:])]
    assert all(0.012 - 1e-9 <= g <= 0.028 + 1e-9 for g in gaps) and len(set(gaps)) > 5
    server = make_timed("--ttft", "0.1", "--itl", "0.02", "--jitter", "0.008", "--seed", "7")
    r = stream(server.url, "[j] x", 20)
    (line,) = server.log(at_least=1)
    planned = schedule(cfg, line["index"], 20)
    assert line["ttft_s"] == round(planned[0], 6)
    assert planned[0] <= r.ttft_s < planned[0] + SLACK
    assert (r.token_ns[-1] - r.start_ns) / 1e9 >= planned[-1] - 0.002


def test_a_client_that_hangs_up_is_an_abort(make_timed) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.05")
    with httpx.stream("POST", f"{server.url}{CHAT_PATH}", json=chat_payload(MODEL, "[gone] x", 200),
                      timeout=10) as resp:
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
    (line,) = server.log(at_least=1, within_s=5)
    assert line["usage"] is None and 0 < line["tokens_sent"] < 200
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    assert 'finished_reason="abort"' in text
    assert scrape(server.url).running == 0


def test_sigterm_ends_open_streams_and_exits_zero(make_timed) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.5")
    opened = threading.Event()

    def hold() -> None:
        try:
            with httpx.stream("POST", f"{server.url}{CHAT_PATH}", json=chat_payload(MODEL, "x", 100),
                              timeout=10) as resp:
                opened.set()
                resp.read()
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert opened.wait(10)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 5
    thread.join(timeout=5)
    assert "Traceback" not in server.stop()


def test_the_word_tokenizer() -> None:
    assert count_words("[t] a  b\nc") == 4
    assert count_words([{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}]) == 3
    assert count_words(None) == 0
