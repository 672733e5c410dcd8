"""A unit that dies on its own is explained: its status or signal, a cause a person can act
on, and its log's last lines, on the record and in the message."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harness.embedded import models
from harness.records.unit_death import explain

from conftest import Project


def test_sigill_names_the_cpu_features_and_the_rebuild():
    death = explain(-signal.SIGILL, "system_info: n_threads = 2 | CPU : AVX512 = 1\nllama threadpool init\n")
    assert death.signal == "SIGILL" and death.exit_code is None
    assert "CPU features this machine lacks" in death.cause and "make setup" in death.cause
    assert death.log_tail[-1] == "llama threadpool init"
    assert death.summary().startswith("killed by SIGILL: illegal instruction")


def test_sigkill_points_at_memory():
    death = explain(-signal.SIGKILL, "loading model\n")
    assert death.signal == "SIGKILL" and "out-of-memory" in death.cause


def test_a_missing_library_is_named():
    log = ("llama-server: error while loading shared libraries: libllama-common.so.0: "
           "cannot open shared object file: No such file or directory\n")
    death = explain(127, log)
    assert death.exit_code == 127 and death.signal is None
    assert "libllama-common.so.0" in death.cause


def test_a_plain_failure_keeps_the_last_lines_only():
    log = "".join(f"line {i}\n" for i in range(100))
    death = explain(1, log)
    assert death.exit_code == 1 and death.summary().startswith("exited with status 1")
    assert death.log_tail == [f"line {i}" for i in range(85, 100)]


def test_an_unknown_status_is_not_invented():
    death = explain(None, "")
    assert death.exit_code is None and death.signal is None and death.log_tail == []


STANDIN = """#!/usr/bin/env bash
# A llama-server that starts like the real one, then meets an instruction this CPU lacks.
echo "build: 11434 (stand-in) with cc for x86_64-linux-gnu"
echo "system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 |"
echo "llama threadpool init, n_threads = 2"
kill -ILL $$
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_server_killed_by_sigill_is_explained_on_the_record(project: Project, tmp_path: Path):
    if models.installed(models.MODELS["HuggingFaceTB/SmolLM2-135M-Instruct"]) is None:
        pytest.fail("the embedded models are not installed: run `make setup`")
    standin = tmp_path / "llama-server"
    standin.write_text(STANDIN)
    standin.chmod(0o755)
    project.add_environment("cpu-standin", f"name: cpu-standin\nstack: local-llamacpp\nconfig:\n"
                                           f"  port: 0\n  threads: 2\n  server: {standin}\n")
    project.add_preset("cpu-smollm2-135m", (Path(__file__).resolve().parents[1] / ".vot" / "presets" /
                                            "cpu-smollm2-135m.yaml").read_text())
    code, out, err = project.run_cli(["launch", "local", "cpu-standin", "cpu-smollm2-135m", "--mission", "hello"],
                                     timeout=200)
    assert code == 3, out + err
    assert "Traceback" not in err
    _, rec = project.only_run()
    assert rec["status"] == "fault" and rec["stopped_at"] == "wait-ready", rec
    death = rec["unit_death"]
    assert death["signal"] == "SIGILL" and death["exit_code"] is None
    assert "CPU features this machine lacks" in death["cause"]
    assert any("system_info" in line for line in death["log_tail"])
    assert "killed by SIGILL" in rec["reason"]
    assert "SIGILL" in out + err  # the person is told, not only the record
    assert rec["times"]["destroyed"] and project.ledger() == {}
