"""Reading /metrics: vLLM's current names, its retired ones, llama.cpp's; the `metrics` command."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from timed_replay import REPO, make_timed  # noqa: F401 - the fixture

from harness.load.metrics import MetricsSnapshot, delta, metrics_url, parse, scrape

CLI = REPO / ".venv" / "bin" / "llms-benchmark"

CURRENT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 900.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 100.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1500.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 256.0
vllm:generation_tokens_total{engine="1",model_name="m"} NaN
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.9
"""

RETIRED = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
vllm:num_preemptions{model_name="m"} 7
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 40
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 10
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 64
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.125
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_current_vllm_names_summed_across_engines_kv_max() -> None:
    snap = parse(CURRENT)
    assert snap.server == "vllm"
    assert (snap.running, snap.waiting, snap.busy) == (7, 1, 8)
    assert snap.kv_usage == 0.5  # the fullest engine, not the sum
    assert snap.preemptions_total == 7  # _created samples are not counts
    assert (snap.prefix_cache_queries_total, snap.prefix_cache_hits_total) == (1500, 1000)
    assert snap.prompt_tokens_total == 1500
    assert snap.generation_tokens_total == 256  # a NaN sample is dropped
    assert snap.raw["vllm:time_to_first_token_seconds_count"] == 4
    assert not any(name.endswith(("_bucket", "_created")) for name in snap.raw)
    assert parse(CURRENT, figures_only=True).figures() == snap.figures()


def test_retired_vllm_names_are_fallbacks() -> None:
    snap = parse(RETIRED)
    assert snap.server == "vllm"
    assert snap.kv_usage == 0.75 and snap.preemptions_total == 7
    assert (snap.prefix_cache_queries_total, snap.prefix_cache_hits_total) == (40, 10)
    assert snap.running is None and snap.busy is None
    # the current name wins where both are exposed (0.9.2 – 0.10.x expose both)
    both = parse(RETIRED + "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n")
    assert both.kv_usage == 0.1


def test_llamacpp_names() -> None:
    snap = parse(LLAMACPP)
    assert snap.server == "llamacpp"
    assert (snap.running, snap.waiting, snap.kv_usage) == (2, 1, 0.125)
    assert (snap.prompt_tokens_total, snap.generation_tokens_total) == (120, 64)
    assert snap.preemptions_total is None and snap.prefix_cache_hits_total is None


def test_unknown_server_and_delta() -> None:
    snap = parse("some_metric 1\n")
    assert snap.server == "unknown" and snap.running is None and snap.raw == {"some_metric": 1}
    a, b = MetricsSnapshot(preemptions_total=3), MetricsSnapshot(preemptions_total=5)
    assert delta(a, b, "preemptions_total") == 2
    assert delta(b, a, "preemptions_total") is None  # a restarted server: not a negative count
    assert delta(None, b, "preemptions_total") is None


def test_metrics_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"


class _Garbage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        body = b'{"this is": "not an exposition"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_scrape_returns_none_when_unreachable_or_unparseable() -> None:
    assert scrape("http://127.0.0.1:9", timeout=1) is None
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        assert scrape(f"http://127.0.0.1:{server.server_address[1]}", timeout=2) is None
    finally:
        server.shutdown()
        server.server_close()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_metrics_command_once_and_watch(make_timed) -> None:
    server = make_timed("--engines", "2", "--ttft", "0.01", "--itl", "0.001")
    server.script(preemptions=4, waiting=2, kv_usage=0.3)
    once = cli("metrics", server.url, "--json")
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)
    assert doc["server"] == "vllm" and doc["url"] == f"{server.url}/metrics"
    assert doc["figures"]["preemptions_total"] == 4 and doc["figures"]["waiting"] == 2
    assert doc["figures"]["kv_usage"] == 0.3
    human = cli("metrics", "--base-url", server.url)
    assert human.returncode == 0 and "preemptions_total" in human.stdout

    watch = cli("metrics", server.url, "--watch", "0.2", "--count", "3", "--json")
    assert watch.returncode == 0, watch.stderr
    lines = [json.loads(line) for line in watch.stdout.splitlines()]
    assert len(lines) == 3 and all(line["reachable"] for line in lines)
    assert "output_tokens_per_s" not in lines[0]
    assert lines[1]["output_tokens_per_s"] == 0 and lines[2]["preemptions_delta"] == 0
    text = cli("metrics", server.url, "--watch", "0.1", "--count", "2")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 2 and "waiting=2" in text.stdout


@pytest.mark.parametrize("args", [["http://127.0.0.1:9"], ["http://127.0.0.1:9", "--watch", "1", "--count", "2"],
                                  []])
def test_metrics_command_refuses_clearly(args: list[str]) -> None:
    result = cli("metrics", *args)
    assert result.returncode == 2
    assert "error:" in result.stderr and "Traceback" not in result.stderr
