"""The speed probe against the replay server's timed fallback, whose prefill and
decode rates are known: the probe must recover them from streamed timings."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.probe import run_probe


@pytest.fixture
def timed_server(tmp_path):
    trajectory = tmp_path / "timed.yaml"
    trajectory.write_text("fallback: {prefill_tps: 20000, decode_tps: 100}\ntrajectories: []\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.replay.server", "--trajectory", str(trajectory), "--port", "0",
         "--served-model-name", "timed", "--max-model-len", "32768"],
        stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(re.search(r":(\d+)$", line.strip()).group(1))
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_probe_recovers_known_rates(timed_server):
    probe = run_probe(timed_server, "timed", max_model_len=32768, long_target=16000, short_tokens=64,
                      long_output=32)
    assert probe.decode_short_tps == pytest.approx(100, rel=0.15)
    assert probe.decode_long_tps == pytest.approx(100, rel=0.15)
    assert probe.prefill_tps == pytest.approx(20000, rel=0.25)
    # sized by calibrating the server's own token counts, within a few percent of the target
    assert probe.long_context_tokens == pytest.approx(16000, rel=0.05)


def test_long_context_is_capped_by_max_model_len(timed_server):
    probe = run_probe(timed_server, "timed", max_model_len=8192, long_target=82000, short_tokens=16, long_output=16)
    assert probe.long_context_tokens <= 8192
    assert any("capped" in note for note in probe.notes)
