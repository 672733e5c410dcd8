"""The replay server, exercised as a real process over loopback HTTP."""

from __future__ import annotations

import json
import math
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.errors import UserError
from harness.replay.trajectory import load_trajectory

REPO = Path(__file__).resolve().parents[1]
MODEL = "replay/test-model"
DATE_PROMPT = "Please run the shell command date and tell me the day."

TRAJECTORY = """
label: "scripted trajectory (not a model)"
fallback: {prefill_tps: 1000, decode_tps: 400}
trajectories:
  - name: smoke
    match: "run the shell command date"
    steps:
      - tool_calls:
          - name: bash
            arguments: {command: "date", description: "Print the date"}
          - name: read
            arguments: {filePath: "/tmp/a \\"quoted\\" name.txt"}
        usage: {prompt_tokens: 9000, completion_tokens: 24}
        ttft: 0.2
        duration: 0.4
      - text: "It is Sunday, the day of rest."
        reasoning: "The date command printed Sun."
        usage: {prompt_tokens: 9100, completion_tokens: 16, cached_tokens: 8960, reasoning_tokens: 7}
  - name: broken
    match: "trigger the error"
    steps:
      - error: {status: 500, message: "upstream exploded"}
  - name: stalled
    match: "stall please"
    steps:
      - stall: 1.5
"""


@dataclass
class Replay:
    proc: subprocess.Popen
    url: str
    served_log: Path

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 10.0), **kw)

    def log_lines(self) -> list[dict]:
        if not self.served_log.exists():
            return []
        return [json.loads(line) for line in self.served_log.read_text().splitlines()]


def start_replay(tmp_path: Path, *, trajectory_text: str = TRAJECTORY, model: str = MODEL) -> Replay:
    tmp_path.mkdir(parents=True, exist_ok=True)
    trajectory = tmp_path / "trajectory.yaml"
    trajectory.write_text(trajectory_text)
    served_log = tmp_path / "served.jsonl"
    cmd = [
        sys.executable, "-m", "harness.replay.server", "--trajectory", str(trajectory),
        "--host", "127.0.0.1", "--port", "0", "--served-model-name", model,
        "--max-model-len", "32768", "--served-log", str(served_log),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=15):
            proc.kill()
            pytest.fail("replay server printed nothing within 15 s")
    line = proc.stdout.readline().strip()
    prefix = "replay server (scripted trajectory, not a model) listening on "
    assert line.startswith(prefix), (line, proc.stderr.read() if proc.poll() is not None else "")
    return Replay(proc, line.removeprefix(prefix), served_log)


def stop_replay(replay: Replay) -> None:
    if replay.proc.poll() is None:
        replay.proc.terminate()
        try:
            replay.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            replay.proc.kill()
            replay.proc.wait()


@pytest.fixture
def make_replay(tmp_path: Path) -> Iterator:
    started: list[Replay] = []

    def make() -> Replay:
        replay = start_replay(tmp_path / f"r{len(started)}")
        started.append(replay)
        return replay

    yield make
    for replay in started:
        stop_replay(replay)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    replay = start_replay(tmp_path_factory.mktemp("replay"))
    try:
        yield replay
    finally:
        stop_replay(replay)


def chat(messages: list[dict], **extra) -> dict:
    return {"model": MODEL, "messages": messages, **extra}


def streamed(prompt: str, assistants: int = 0, usage: bool = True, **extra) -> dict:
    """A request shaped like opencode's: stream, include_usage, tools, max_tokens."""
    messages = [{"role": "system", "content": "You are opencode."}, {"role": "user", "content": prompt}]
    for _ in range(assistants):
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    body = chat(messages, stream=True, tool_choice="auto", tools=[], max_tokens=extra.pop("max_tokens", 32000))
    if usage:
        body["stream_options"] = {"include_usage": True}
    return {**body, **extra}


def read_stream(client: httpx.Client, body: dict) -> tuple[list[tuple[float, dict]], float]:
    """(arrival time, chunk) pairs and the request's start time; asserts a clean SSE ending."""
    t0 = time.monotonic()
    chunks: list[tuple[float, dict]] = []
    done = False
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ") and not done
            if line == "data: [DONE]":
                done = True
            else:
                chunks.append((time.monotonic(), json.loads(line.removeprefix("data: "))))
    assert done, "stream did not end with data: [DONE]"
    return chunks, t0


def deltas(chunks: list[tuple[float, dict]]) -> list[dict]:
    return [c["choices"][0]["delta"] for _, c in chunks if c["choices"]]


def reassemble_tool_calls(chunks: list[tuple[float, dict]]) -> list[dict]:
    calls: dict[int, dict] = {}
    for delta in deltas(chunks):
        for tc in delta.get("tool_calls", []):
            call = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
            call["id"] = tc.get("id", call["id"])
            call["name"] += tc.get("function", {}).get("name", "")
            call["arguments"] += tc.get("function", {}).get("arguments", "")
    return [calls[i] for i in sorted(calls)]


def text(chunks: list[tuple[float, dict]]) -> str:
    return "".join(d.get("content") or "" for d in deltas(chunks))


def usage_chunks(chunks: list[tuple[float, dict]]) -> list[dict]:
    return [c for _, c in chunks if "usage" in c]


# ---------------------------------------------------------------- routes


def test_health_and_models(shared: Replay) -> None:
    with shared.client() as client:
        assert client.get("/health").json() == {"status": "ok"}
        models = client.get("/v1/models").json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert model["id"] == MODEL and model["object"] == "model"
    assert model["owned_by"] == "llms-benchmark-replay"
    assert model["max_model_len"] == 32768
    assert model["root"] == "scripted trajectory (not a model)"


def test_unknown_model_is_404_like_vllm(shared: Replay) -> None:
    with shared.client() as client:
        response = client.post("/v1/chat/completions", json={**streamed(DATE_PROMPT), "model": "other"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert "other" in error["message"] and error["code"] == 404 and error["type"]


# ---------------------------------------------------------------- scripted steps


def test_tool_calls_stream_reassembles_into_the_scripted_calls(shared: Replay) -> None:
    with shared.client() as client:
        chunks, t0 = read_stream(client, streamed(DATE_PROMPT))
    bodies = [c for _, c in chunks]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in bodies)
    assert len({c["id"] for c in bodies}) == 1
    assert bodies[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    calls = reassemble_tool_calls(chunks)
    assert [c["name"] for c in calls] == ["bash", "read"]
    assert json.loads(calls[0]["arguments"]) == {"command": "date", "description": "Print the date"}
    assert json.loads(calls[1]["arguments"]) == {"filePath": '/tmp/a "quoted" name.txt'}
    assert all(c["id"].startswith("call_") for c in calls) and calls[0]["id"] != calls[1]["id"]
    # Arguments arrive in several pieces, as a real model streams them.
    assert sum(1 for d in deltas(chunks) if "tool_calls" in d) > 4
    finishes = [c["choices"][0]["finish_reason"] for c in bodies if c["choices"]]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[0][0] - t0 >= 0.18  # the scripted ttft
    (usage,) = usage_chunks(chunks)
    assert usage["choices"] == [] and usage is bodies[-1]
    assert usage["usage"]["prompt_tokens"] == 9000 and usage["usage"]["completion_tokens"] == 24
    assert usage["usage"]["total_tokens"] == 9024


def test_text_step_streams_reasoning_then_text_with_cache_and_reasoning_tokens(shared: Replay) -> None:
    with shared.client() as client:
        chunks, _ = read_stream(client, streamed(DATE_PROMPT, assistants=1))
    ds = deltas(chunks)
    texts = [d["content"] for d in ds if d.get("content")]
    reasoning = [d["reasoning_content"] for d in ds if "reasoning_content" in d]
    assert "".join(texts) == "It is Sunday, the day of rest." and len(texts) >= 5
    assert "".join(reasoning) == "The date command printed Sun."
    first_reasoning = next(i for i, d in enumerate(ds) if "reasoning_content" in d)
    first_text = next(i for i, d in enumerate(ds) if d.get("content"))
    assert first_reasoning < first_text
    assert [c for _, c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"] == "stop"
    usage = usage_chunks(chunks)[0]["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 8960}
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 7}
    # What opencode will record (reference/opencode.md §3.1).
    assert usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"] == 140
    assert usage["completion_tokens"] - usage["completion_tokens_details"]["reasoning_tokens"] == 9


def test_usage_chunk_only_when_include_usage(shared: Replay) -> None:
    with shared.client() as client:
        chunks, _ = read_stream(client, streamed(DATE_PROMPT, assistants=1, usage=False))
    assert usage_chunks(chunks) == []
    assert all(c["choices"] for _, c in chunks)


def test_step_selection_is_stateless_by_assistant_count(shared: Replay) -> None:
    parts = [{"type": "text", "text": "<context/>"}, {"type": "text", "text": DATE_PROMPT}]
    with shared.client() as client:
        first, _ = read_stream(client, streamed(DATE_PROMPT))
        # A retry, with the prompt as content parts this time, gets the same step.
        again, _ = read_stream(client, {**streamed(""), "messages": [{"role": "user", "content": parts}]})
        second, _ = read_stream(client, streamed(DATE_PROMPT, assistants=1))
        past_end, _ = read_stream(client, streamed(DATE_PROMPT, assistants=2))
    assert [c["name"] for c in reassemble_tool_calls(first)] == ["bash", "read"]
    assert [c["name"] for c in reassemble_tool_calls(again)] == ["bash", "read"]
    assert reassemble_tool_calls(second) == []
    assert text(second) == "It is Sunday, the day of rest."
    assert text(past_end) == "(end of scripted trajectory)"


def test_error_step_errors_on_every_retry(shared: Replay) -> None:
    with shared.client() as client:
        for _ in range(3):
            response = client.post("/v1/chat/completions", json=streamed("please trigger the error"))
            assert response.status_code == 500
            assert response.json()["error"]["message"] == "upstream exploded"


def test_stall_sends_headers_then_holds_the_stream_open(shared: Replay) -> None:
    t0 = time.monotonic()
    with shared.client(timeout=httpx.Timeout(5.0, read=0.5)) as client:
        with client.stream("POST", "/v1/chat/completions", json=streamed("stall please")) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            with pytest.raises(httpx.ReadTimeout):
                next(response.iter_bytes())
    assert time.monotonic() - t0 < 1.5


def test_non_streaming_completion_has_the_same_content_and_usage(shared: Replay) -> None:
    body = {**streamed(DATE_PROMPT), "stream": False}
    del body["stream_options"]
    with shared.client() as client:
        completion = client.post("/v1/chat/completions", json=body).json()
    assert completion["object"] == "chat.completion"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert calls[0]["function"]["name"] == "bash"
    assert json.loads(calls[0]["function"]["arguments"])["command"] == "date"
    assert completion["usage"]["prompt_tokens"] == 9000


# ---------------------------------------------------------------- fallback (speed probe)


@pytest.mark.parametrize("limit_key", ["max_tokens", "max_completion_tokens"])
def test_fallback_streams_exactly_max_tokens(shared: Replay, limit_key: str) -> None:
    prompt = "x" * 401  # 401 characters + the system prompt, estimated at 4 characters a token
    body = streamed(prompt, max_tokens=None, ignore_eos=True, temperature=0)
    body[limit_key] = 40
    with shared.client() as client:
        chunks, t0 = read_stream(client, body)
    tokens = [d["content"] for d in deltas(chunks) if d.get("content")]
    assert len(tokens) == 40
    usage = usage_chunks(chunks)[0]["usage"]
    assert usage["completion_tokens"] == 40
    assert usage["prompt_tokens"] == math.ceil((401 + len("You are opencode.")) / 4)
    assert [c for _, c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"] == "length"
    # prefill ~0.1 s at 1000 tok/s, then 39 gaps at 400 tok/s.
    assert chunks[-1][0] - t0 >= 0.1 + 39 / 400 - 0.02


# ---------------------------------------------------------------- ground truth and process life


def metric_values(client: httpx.Client) -> dict[tuple[str, tuple], float]:
    text = client.get("/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def value(values: dict, name: str, **labels: str) -> float:
    return values[(name, tuple(sorted({"engine": "0", "model_name": MODEL, **labels}.items())))]


def test_metrics_and_served_log_match_what_was_served(make_replay) -> None:
    replay = make_replay()
    with replay.client() as client:
        read_stream(client, streamed(DATE_PROMPT))
        read_stream(client, streamed(DATE_PROMPT, assistants=1))
        fallback, _ = read_stream(client, streamed("hello", max_tokens=10))
        client.post("/v1/chat/completions", json=streamed("please trigger the error"))
        fallback_prompt = usage_chunks(fallback)[0]["usage"]["prompt_tokens"]
        values = metric_values(client)
    assert value(values, "vllm:prompt_tokens_total") == 9000 + 9100 + fallback_prompt
    assert value(values, "vllm:generation_tokens_total") == 24 + 16 + 10
    assert value(values, "vllm:request_success_total", finished_reason="stop") == 2
    assert value(values, "vllm:request_success_total", finished_reason="length") == 1
    assert value(values, "vllm:num_requests_running") == 0
    assert value(values, "vllm:num_requests_waiting") == 0
    assert value(values, "vllm:num_preemptions_total") == 0
    assert value(values, "vllm:kv_cache_usage_perc") == 0
    assert value(values, "vllm:time_to_first_token_seconds_count") == 3
    assert value(values, "vllm:e2e_request_latency_seconds_count") == 3

    lines = replay.log_lines()
    summary = [(r["trajectory"], r["step"], r["kind"], r["status"]) for r in lines]
    assert summary == [
        ("smoke", 0, "tool_calls", 200),
        ("smoke", 1, "text", 200),
        (None, None, "fallback", 200),
        ("broken", 0, "error", 500),
    ]
    assert lines[0]["usage"]["prompt_tokens"] == 9000
    assert lines[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 8960
    assert lines[2]["usage"]["completion_tokens"] == 10
    assert lines[3]["usage"] is None
    assert all(r["started"] <= r["finished"] for r in lines)
    assert lines[0]["finished"] - lines[0]["started"] >= 0.38  # the scripted duration


def test_waiting_gauge_and_a_client_that_hangs_up(make_replay) -> None:
    replay = make_replay()
    with replay.client(timeout=httpx.Timeout(5.0, read=0.6)) as stalled, replay.client() as client:
        with stalled.stream("POST", "/v1/chat/completions", json=streamed("stall please")) as response:
            assert response.status_code == 200
            assert value(metric_values(client), "vllm:num_requests_waiting") == 1
        # Hang up mid-stream on a long fallback stream too.
        with client.stream("POST", "/v1/chat/completions", json=streamed("hi", max_tokens=5000)) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
        deadline = time.monotonic() + 3
        while len(replay.log_lines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        values = metric_values(client)
        assert client.get("/health").json() == {"status": "ok"}
    kinds = sorted((r["kind"], r["usage"]) for r in replay.log_lines())
    assert kinds == [("fallback", None), ("stall", None)]  # cut off: no usage was served
    assert value(values, "vllm:num_requests_waiting") == 0
    assert value(values, "vllm:num_requests_running") == 0
    assert value(values, "vllm:request_success_total", finished_reason="abort") == 2
    replay.proc.terminate()
    _, stderr = replay.proc.communicate(timeout=5)
    assert "Traceback" not in stderr


def test_sigterm_ends_a_stall_and_exits_zero(make_replay) -> None:
    replay = make_replay()
    opened = threading.Event()

    def hold_a_stall() -> None:
        with replay.client(timeout=10.0) as client:
            with client.stream("POST", "/v1/chat/completions", json=streamed("stall please")) as response:
                opened.set()
                response.read()

    thread = threading.Thread(target=hold_a_stall, daemon=True)
    thread.start()
    assert opened.wait(5)
    t0 = time.monotonic()
    replay.proc.send_signal(signal.SIGTERM)
    assert replay.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 3
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [r["kind"] for r in replay.log_lines()] == ["stall"]


# ---------------------------------------------------------------- the trajectory file


def test_load_trajectory_defaults(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TRAJECTORY)
    trajectory = load_trajectory(path)
    smoke = trajectory.trajectories[0]
    assert [s.kind for s in smoke.steps] == ["tool_calls", "text"]
    assert smoke.steps[1].ttft == 0.05 and smoke.steps[1].total_duration == pytest.approx(0.1)
    assert trajectory.find("x trigger the error y").name == "broken"
    assert trajectory.find("nothing") is None


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("trajectories:\n  - {name: a, match: b, steps: [{text: hi, stall: 3}]}\n", "trajectories[0].steps[0]", "exactly one"),  # noqa: E501
        ("trajectories:\n  - {name: a, match: b, steps: [{text: hi, usage: {prompt_tokens: 1, completion_tokens: 1, cached_tokens: 5}}]}\n", "trajectories[0].steps[0].usage", "cached_tokens"),  # noqa: E501
        ("trajectories:\n  - {name: a, match: b, steps: [{texts: hi}]}\n", "trajectories[0].steps[0].texts", "Extra"),
    ],
)
def test_load_trajectory_refuses_with_the_field(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_trajectory(path)
    assert caught.value.file == str(path)
    assert caught.value.field is not None and caught.value.field == field
    assert words in caught.value.message


def test_load_trajectory_reports_yaml_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("label: ok\ntrajectories: [\n  {name: a\n")
    with pytest.raises(UserError) as caught:
        load_trajectory(path)
    assert caught.value.line is not None and "YAML" in caught.value.message
