"""`llms-benchmark load` against the timed replay server: every figure it reports is checked
against what the server did (its served log and /metrics), with tolerances generous enough
for a loaded 2-core machine (precision belongs to bench/load_accuracy.py)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from timed_replay import MODEL, REPO, make_timed  # noqa: F401 - the fixture

from harness.cli.common import comma_list
from harness.load.client import Result
from harness.load.results import CSV_COLUMNS, Level, percentiles, summarise
from harness.load.runner import parse_levels, parse_shapes

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
TTFT, ITL = 0.05, 0.01
SLACK = 0.25  # seconds a loaded machine may add to a TTFT


def load_cli(out: Path, *args: str, timeout: float = 180, root: Path | None = None,
             env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "COLUMNS": "250", **(env or {})}
    if root is not None:
        full_env["LLMS_BENCHMARK_ROOT"] = str(root)
    return subprocess.run([str(CLI), "load", *args, "--out-dir", str(out)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=full_env, cwd=root or out.parent)


def only_run(out: Path) -> Path:
    runs = list(out.iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_load_reports_what_the_server_did(make_timed, tmp_path: Path) -> None:
    server = make_timed("--ttft", str(TTFT), "--itl", str(ITL), "--preempt-every", "3", "--kv-tokens", "10000")
    out = tmp_path / "bench-results"
    result = load_cli(out, server.url, "--concurrency", "1,3", "--shapes", "short=40,long=300",
                      "--output-tokens", "12", "--requests", "6", "--sample-interval", "0.1", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    run = only_run(out)
    assert printed["results"] == str(run)
    assert sorted(p.name for p in run.iterdir()) == ["requests.jsonl", "summary.csv", "summary.json",
                                                      "throughput.png", "ttft.png"]
    summary = json.loads((run / "summary.json").read_text())
    rows = summary["levels"]
    assert [(r["shape"], r["concurrency"]) for r in rows] == [("short", 1), ("short", 3), ("long", 1), ("long", 3)]
    assert rows == printed["levels"]

    meta = summary["meta"]
    assert meta["model"] == MODEL and meta["target"] == server.url
    assert meta["server"]["models"]["data"][0]["id"] == MODEL
    assert meta["server"]["version"]["version"].startswith("replay-timed") and meta["server"]["metrics"] == "vllm"
    params = meta["parameters"]
    assert params["levels"] == [1, 3] and params["shapes"] == {"short": 40, "long": 300}
    assert params["output_tokens"] == 12 and params["requests"] == 6 and "api_key" not in params
    assert "linear" in meta["percentile_method"]

    with open(run / "summary.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0].keys()) == CSV_COLUMNS and len(table) == 4
    assert table[1]["succeeded"] == "6" and float(table[1]["ttft_p50_s"]) == rows[1]["ttft_p50_s"]

    requests = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    served = {line["tag"]: line for line in server.log(at_least=1 + 4 * 6)}
    warmups = [tag for tag in served if tag.endswith("-warmup")]
    assert len(warmups) == 1 and len(served) == 1 + 4 * 6
    by_level = defaultdict(list)
    for req in requests:
        by_level[(req["shape"], req["concurrency"])].append(req)
        truth = served[req["tag"]]  # every request the client reports, the server served
        assert req["ok"] and req["prompt_tokens"] == truth["usage"]["prompt_tokens"]
        assert req["completion_tokens"] == truth["usage"]["completion_tokens"] == req["chunks"] == 12
        assert len(req["itl_ms"]) == 11
        assert TTFT <= req["ttft_s"] < TTFT + SLACK  # never earlier than the server sent it
        assert req["e2e_s"] >= TTFT + 11 * ITL - 0.002

    for row in rows:
        reqs = by_level[(row["shape"], row["concurrency"])]
        tags = {r["tag"] for r in reqs}
        assert len(reqs) == row["requests"] == row["succeeded"] == 6 and row["failed"] == 0 and row["errors"] == {}
        assert all(tag.split("-")[1:3] == [row["shape"], str(row["concurrency"])] for tag in tags)
        size = {"short": 40, "long": 300}[row["shape"]]
        assert row["input_tokens_mean"] == size == row["target_input_tokens"]  # counted by the server
        assert row["output_tokens_mean"] == 12
        # throughput: the server's tokens over the wall time
        assert row["output_throughput_tok_s"] == pytest.approx(6 * 12 / row["wall_time_s"], rel=1e-3)
        assert row["total_throughput_tok_s"] == pytest.approx(6 * (size + 12) / row["wall_time_s"], rel=1e-3)
        assert row["request_throughput_rps"] == pytest.approx(6 / row["wall_time_s"], rel=1e-3)
        # percentiles are numpy's linear interpolation over the per-request figures
        ttfts = [r["ttft_s"] for r in reqs]
        assert row["ttft_p95_s"] == pytest.approx(float(np.percentile(ttfts, 95)), abs=2e-6)
        assert TTFT <= row["ttft_p50_s"] < TTFT + SLACK
        assert row["itl_p50_ms"] == pytest.approx(ITL * 1000, abs=6)
        assert row["tpot_mean_ms"] == pytest.approx(ITL * 1000, abs=6)
        assert row["itl_samples"] == 6 * 11
        # preemptions: the counter's growth over the level = the level's preempted requests
        assert row["preemptions"] == sum(1 for t in tags if served[t]["preempted"])
        # sampled peaks never exceed what can have been in flight
        assert row["metrics_samples"] >= 1 and row["idle_before"] is True
        assert 0 <= row["running_peak"] <= row["concurrency"] and row["waiting_peak"] == 0
        assert 0 <= row["kv_cache_peak_percent"] <= 100 * row["concurrency"] * (size + 12) / 10000
    assert sum(r["preemptions"] for r in rows) == sum(1 for line in server.log() if line["preempted"]
                                                       and not line["tag"].endswith("-warmup"))


def test_waiting_peak_and_errors_by_type(make_timed, tmp_path: Path) -> None:
    server = make_timed("--ttft", "0.3", "--itl", "0.01", "--max-running", "1")
    out = tmp_path / "bench-results"
    # c=3 behind one running slot: the others wait; a 0.45 s read timeout fails the third in line
    result = load_cli(out, server.url, "--concurrency", "3", "--shapes", "short=20", "--output-tokens", "4",
                      "--requests", "3", "--timeout", "0.45", "--no-warmup", "--sample-interval", "0.1", "--yes",
                      "--json")
    assert result.returncode == 1, result.stderr  # a level with failures
    (row,) = json.loads(result.stdout)["levels"]
    assert row["requests"] == 3 and row["failed"] >= 1 and row["errors"] == {"timeout": row["failed"]}
    assert row["succeeded"] + row["failed"] == 3
    assert 1 <= row["waiting_peak"] <= 2 and row["running_peak"] == 1


def test_duration_bounds_a_level(make_timed, tmp_path: Path) -> None:
    server = make_timed("--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "bench-results"
    result = load_cli(out, "--base-url", server.url, "--concurrency", "2", "--shapes", "short=16",
                      "--output-tokens", "4", "--duration", "0.6", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["levels"]
    assert row["requests"] >= 4 and row["failed"] == 0 and row["wall_time_s"] >= 0.6
    assert row["requests"] == len([line for line in server.log(at_least=row["requests"] + 1)
                                   if not line["tag"].endswith("-warmup")])


def test_busy_server_is_refused_unless_allowed(make_timed, tmp_path: Path) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.001")
    server.script(running=2, waiting=1)
    out = tmp_path / "bench-results"
    refused = load_cli(out, server.url, "--concurrency", "1", "--shapes", "short=8", "--requests", "1",
                       "--output-tokens", "2", "--yes")
    assert refused.returncode == 2
    assert "busy" in refused.stderr and "--allow-busy" in refused.stderr and "Traceback" not in refused.stderr
    assert not out.exists() and server.log() == []
    allowed = load_cli(out, server.url, "--concurrency", "1", "--shapes", "short=8", "--requests", "1",
                       "--output-tokens", "2", "--yes", "--allow-busy", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads((only_run(out) / "summary.json").read_text())["meta"]["server"]["busy_at_start"] == 3


@pytest.mark.parametrize(("args", "words"), [
    (["--concurrency", "1,x"], "--concurrency"),
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", ""], "--concurrency"),
    (["--shapes", "short,huge"], "--shapes"),
    (["--model", "not-served"], "does not serve model 'not-served'"),
    (["--output-tokens", "0"], "--output-tokens"),
    ([], "confirmation"),  # no --yes and no terminal to ask at
])
def test_bad_input_is_one_clear_error_and_writes_nothing(make_timed, tmp_path: Path, args: list[str],
                                                         words: str) -> None:
    server = make_timed("--ttft", "0.01", "--itl", "0.001")
    out = tmp_path / "bench-results"
    yes = [] if not args else ["--yes"]
    result = load_cli(out, server.url, "--requests", "1", "--output-tokens", "2", *yes, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert words in result.stderr and "fix:" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
    assert server.log() == []  # nothing was sent


def test_unreachable_url_and_bad_target(tmp_path: Path) -> None:
    out = tmp_path / "bench-results"
    for args in (["http://127.0.0.1:9"], ["not-a-url"], ["a", "b", "c"]):
        result = load_cli(out, *args, "--yes")
        assert result.returncode == 2, (args, result.stderr)
        assert "error:" in result.stderr and "Traceback" not in result.stderr
        assert not out.exists()
    assert "cannot reach http://127.0.0.1:9" in load_cli(out, "http://127.0.0.1:9", "--yes").stderr


def test_serves_an_environment_preset_and_always_destroys(project, tmp_path: Path) -> None:
    out = tmp_path / "bench-results"
    result = load_cli(out, "replay", "replay-hello", "--concurrency", "1,2", "--shapes", "short=24",
                      "--requests", "2", "--output-tokens", "3", "--yes", "--json", root=project.root,
                      env=project.env)
    assert result.returncode == 0, result.stderr
    assert "destroyed vot-replay-hello" in result.stderr
    run = only_run(out)
    rows = json.loads((run / "summary.json").read_text())["levels"]
    assert [r["succeeded"] for r in rows] == [2, 2] and all(r["output_tokens_mean"] == 3 for r in rows)
    assert (run / "unit.log").is_file()
    assert project.ledger() == {}, f"the ledger still holds {project.ledger()}"
    assert project.survivors() == []


def test_summarise_percentiles_are_numpy_linear() -> None:
    assert percentiles([1, 2, 3, 4], (50, 95)) == [2.5, pytest.approx(3.85)]
    assert percentiles([], (50,)) == [None]
    level = Level("short", 2, 10, wall_s=2.0)
    for i, (ttft_ms, ok) in enumerate([(100, True), (200, True), (0, False)]):
        r = Result(ok=ok, error=None if ok else "HTTP 500", start_ns=0, end_ns=500_000_000,
                   token_ns=[ttft_ms * 1_000_000, ttft_ms * 1_000_000 + 10_000_000] if ok else [],
                   prompt_tokens=10 if ok else None, completion_tokens=2 if ok else None)
        level.requests.append((i, f"t-{i}", r))
    row = summarise(level)
    assert (row["requests"], row["succeeded"], row["failed"], row["errors"]) == (3, 2, 1, {"HTTP 500": 1})
    assert row["ttft_p50_s"] == 0.15 and row["output_throughput_tok_s"] == 2.0
    assert row["total_throughput_tok_s"] == 12.0 and row["tpot_mean_ms"] == 10.0 and row["itl_p50_ms"] == 10.0


def test_option_parsers() -> None:
    assert parse_levels(comma_list(["1, 8,16"])) == [1, 8, 16]
    assert parse_shapes(comma_list(["short,long"]), 512, 16384) == {"short": 512, "long": 16384}
    assert parse_shapes(["tiny=5"], 1, 2) == {"tiny": 5}


# ---------------------------------------------------------------- the client's parsing, on crafted bytes


def serve_bytes(chunks: list[bytes], gap_s: float = 0.01):
    """A one-connection raw server: reads a request, then writes `chunks` with a pause between."""
    import socket
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 << 16)
            for part in chunks:
                conn.sendall(part)
                time.sleep(gap_s)
        listener.close()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def client_result(url: str, **kw) -> Result:
    import asyncio

    from harness.load.client import CHAT_PATH, StreamClient, chat_payload

    async def go() -> Result:
        client = StreamClient(url, **kw)
        try:
            return await client.stream(CHAT_PATH, chat_payload("m", "x", 3))
        finally:
            await client.aclose()

    return asyncio.run(go())


def sse_event(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def test_client_parses_split_chunked_frames_spaced_json_and_reasoning() -> None:
    events = (sse_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
              + sse_event({"choices": [{"delta": {"reasoning_content": "think"}}]})  # spaced JSON: slow path
              + sse_event(b'{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}')
              + sse_event(b'{"choices":[{"delta":{"content":"b"},"finish_reason":"length"}]}')
              + sse_event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
              + b"data: [DONE]\n\n")
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw = head + body
    # cut everywhere awkward: inside the head, the chunk size line, an event, the terminator
    cuts = [10, len(head) + 2, len(head) + 40, len(head) + 200, len(raw) - 3]
    parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    r = client_result(serve_bytes(parts))
    assert r.ok and r.status == 200 and r.chunks == 3  # reasoning counts as a token; the role chunk does not
    assert (r.prompt_tokens, r.completion_tokens, r.finish_reason) == (7, 3, "length")
    assert r.ttft_s is not None and r.e2e_s >= r.ttft_s


def test_client_reports_http_and_stream_errors_and_a_cut_stream() -> None:
    payload = json.dumps({"error": {"message": "no such model", "type": "NotFoundError"}}).encode()
    r = client_result(serve_bytes([b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)]))
    assert not r.ok and r.error == "HTTP 404" and r.detail == "no such model"

    events = sse_event({"choices": [{"delta": {"content": "a"}}]}) + sse_event({"error": {"message": "boom"}})
    r = client_result(serve_bytes([b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + events
                                   + b"data: [DONE]\n\n"]))  # a body delimited by the connection's end
    assert not r.ok and r.error == "stream error" and r.detail == "boom" and r.chunks == 1

    r = client_result(serve_bytes([b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n"
                                   + b"%x\r\n%s\r\n" % (len(events[:40]), events[:40])]))
    assert not r.ok and r.error == "incomplete response"

    r = client_result(serve_bytes([b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"], gap_s=1.0),
                      idle_timeout=0.3)
    assert not r.ok and r.error == "timeout"


def test_a_keep_alive_connection_dropped_as_a_request_goes_out_is_retried_once() -> None:
    """The server answers on a keep-alive connection, then closes it when the next request
    arrives without answering (its keep-alive limit): the client sends that request again on
    a fresh connection, and only once."""
    import asyncio
    import socket
    import threading

    from harness.load.client import StreamClient

    srv = socket.create_server(("127.0.0.1", 0))
    port, accepted = srv.getsockname()[1], []
    body = b'{"object":"list","data":[]}'
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def serve() -> None:
        srv.settimeout(20)
        first, _ = srv.accept()
        accepted.append(first)
        first.recv(65536)
        first.sendall(answer)
        first.recv(65536)  # the second request on the same connection: dropped, unanswered
        first.close()
        second, _ = srv.accept()
        accepted.append(second)
        second.recv(65536)
        second.sendall(answer)
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def run() -> tuple[Result, Result]:
        client = StreamClient(f"http://127.0.0.1:{port}")
        try:
            return await client.get("/v1/models"), await client.get("/v1/models")
        finally:
            await client.aclose()

    first, second = asyncio.run(run())
    thread.join(timeout=20)
    srv.close()
    assert first.ok and not first.reused
    assert second.ok and second.body == body and not second.reused  # the retry, on a fresh connection
    assert len(accepted) == 2
