"""`llms-benchmark export RUN --otel FILE|URL` (and `--atif`) through the real console script:
the spans reach the harness's own OTLP receiver (harness/telemetry/receiver.py, a subprocess on
loopback) with the GenAI attributes, and their token counts are the trajectory's."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import atif
import pytest

from harness.trajectory.atif_out import build_trajectory
from test_telemetry_store import StoreProc, start_store

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "llms-benchmark"
REAL = REPO / "tests" / "fixtures" / "runs" / "20261206T030208Z-cpu-qwen2-5-coder-1-5b-medium-8176"


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "export", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[StoreProc]:
    store = start_store(tmp_path)
    try:
        yield store
    finally:
        store.stop()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    dest = tmp_path / "project" / ".llms-benchmark" / "runs" / REAL.name
    shutil.copytree(REAL, dest)
    return dest


def _spans(store: StoreProc) -> list[dict]:
    rows = store.query("SELECT span_id, parent_span_id, name, kind, start_ns, end_ns, attributes FROM spans "
                       "ORDER BY start_ns")
    for r in rows:
        r["attributes"] = json.loads(r["attributes"]) if isinstance(r["attributes"], str) else r["attributes"]
    return rows


def _check(spans: list[dict], traj: atif.Trajectory) -> None:
    [agent] = [s for s in spans if s["name"] == "invoke_agent opencode"]
    a = agent["attributes"]
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "opencode"
    fm = traj.final_metrics
    assert a["gen_ai.usage.input_tokens"] == fm.total_prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == fm.total_completion_tokens
    steps = [s for s in traj.steps if s.metrics is not None]
    chats = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(chats) == len(steps) == 12
    for span, step in zip(chats, steps):
        attrs = span["attributes"]
        assert span["name"] == f"chat {step.model_name}" and span["parent_span_id"] == agent["span_id"]
        assert attrs["gen_ai.request.model"] == step.model_name == traj.agent.model_name
        assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"] == "llama.cpp"
        assert attrs["gen_ai.usage.input_tokens"] == step.metrics.prompt_tokens
        assert attrs["gen_ai.usage.output_tokens"] == step.metrics.completion_tokens
        assert attrs["gen_ai.usage.cache_read.input_tokens"] == step.metrics.cached_tokens
        # The span's times are the wire's: the request's start and its answer's end.
        assert span["start_ns"] // 1000 == round(_ts(step.metrics.extra["started"]) * 1e6)
        assert span["end_ns"] // 1000 == round(_ts(step.metrics.extra["ended"]) * 1e6)
    assert sum(c["attributes"]["gen_ai.usage.input_tokens"] for c in chats) == fm.total_prompt_tokens
    calls = [c for s in steps for c in s.tool_calls or []]
    tools = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert sorted(t["attributes"]["gen_ai.tool.call.id"] for t in tools) == sorted(c.tool_call_id for c in calls)
    assert {t["name"] for t in tools} == {"execute_tool bash", "execute_tool write"}
    assert all(t["attributes"]["gen_ai.tool.name"] in ("bash", "write") for t in tools)
    assert agent["start_ns"] <= min(s["start_ns"] for s in spans) and agent["end_ns"] >= max(s["end_ns"] for s in spans)


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_export_otel_to_the_harness_receiver(receiver: StoreProc, run_dir: Path) -> None:
    done = cli(str(run_dir), "--atif", "--otel", receiver.url, "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["otel"]["to"] == f"{receiver.url}/v1/traces" and said["atif"].endswith("trajectory.json")
    traj = atif.Trajectory.model_validate(json.loads((run_dir / "trajectory.json").read_text()))
    spans = _spans(receiver)
    assert len(spans) == said["otel"]["spans"]
    _check(spans, traj)


def test_export_otel_to_a_file_is_otlp_json_the_receiver_takes(receiver: StoreProc, run_dir: Path,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "spans.otlp.json"
    done = cli(str(run_dir), "--otel", str(out))
    assert done.returncode == 0, done.stderr
    body = out.read_bytes()
    doc = json.loads(body)
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # OTLP/JSON: hex ids
    status, answer = receiver.post("/v1/traces", body)
    assert status == 200, answer
    _check(_spans(receiver), build_trajectory(run_dir))


@pytest.mark.parametrize(("args", "says"), [
    (["no-such-run", "--atif"], "no run 'no-such-run'"),
    (["{run}"], "nothing to export"),
    (["{run}", "--otel", "http://127.0.0.1:9"], "did not take the spans"),
    (["{run}", "--otel", "ftp://example.invalid/x"], "is not an OTLP/HTTP URL"),
    (["{run}", "--otel", "/no/such/folder/spans.json"], "cannot write spans"),
    ([".llms-benchmark/runs/20261201T035153Z-cpu-qwen2-5-coder-1-5b-medium-ae6c", "--atif"],
     "never started its mission"),
])
def test_export_errors_are_clear(run_dir: Path, args: list[str], says: str) -> None:
    done = cli(*[a.replace("{run}", str(run_dir)) for a in args])
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert "fix:" in done.stderr


def test_without_the_sdk_the_refusal_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from harness.errors import UserError
    from harness.trajectory import otel

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the extra were not installed
    with pytest.raises(UserError) as exc:
        otel._sdk()
    assert "llms-benchmark[observability]" in exc.value.fix and exc.value.field == "--otel"
