"""bench/agents_realism.py against the same box (issue 52): the replay's timings are compared with
the original's after each is put on its own side's probe, so a quiet or busy host does not decide
the ratio; where a side has no probe the raw ratio stands and the page says so."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

from conftest import REPO
from harness.records.capacity import CapacityFigures
from harness.load.agents.trace import AgentTrace, Session, Turn, dump
from harness.records.record import Probe, RowKey, RunRecord, Timestamps


def bench():
    spec = importlib.util.spec_from_file_location("agents_realism", REPO / "bench" / "agents_realism.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_folder(tmp_path: Path, replay_probe: dict | None) -> Path:
    """A committed --capacity run (no wire log): the original's 3 turns each 1.0 s to the first token and
    2.0 s after; the replay, on a box its probe says is twice as fast, took half of each."""
    run_dir = tmp_path / "20261205T000000Z-cpu-x-medium-abcd"
    (run_dir / "capacity").mkdir(parents=True)
    turns = [Turn(start_s=5.0 * i, prompt_tokens=100 + 50 * i, reused_blocks=0 if i == 0 else (50 + 50 * i) // 16,
                  output_tokens=20, think_s=None if i == 0 else 1.0, ttft_s=1.0, duration_s=3.0) for i in range(3)]
    dump(AgentTrace(source="20261205T000000Z-cpu-x-medium-abcd", block_size=16,
                    sessions=[Session(id="s0", turns=turns)]), run_dir / "capacity" / "trace.jsonl")
    replayed = [{"copy": 0, "session": "s0", "turn": i, "ok": True, "ttft_s": 0.5, "turn_s": 1.5, "repeat": 0,
                 "lap": 0, "prompt_tokens": t.prompt_tokens, "cached_tokens": None, "fed": False}
                for i, t in enumerate(turns)]
    # a second repeat, and a second copy, of other speeds: never the replay compared with the original
    replayed += [{**r, "repeat": 1, "ttft_s": 9.0, "turn_s": 19.0} for r in replayed]
    replayed += [{**r, "copy": 1, "ttft_s": 7.0, "turn_s": 17.0} for r in replayed[:3]]
    (run_dir / "capacity" / "agents.json").write_text(json.dumps({"turns_by_level": {"1": replayed},
                                                                  "exact_tokens_by_level": {"1": True}}))
    now = datetime(2026, 12, 5, tzinfo=UTC)
    rec = RunRecord(run_id=run_dir.name, key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="g"),
                    environment="cpu", stack="local", mission="hello", times=Timestamps(launch=now),
                    probe=Probe(prefill_tps=100.0, decode_short_tps=10.0, long_context_tokens=2000),
                    capacity=CapacityFigures(sustained=1, limit_found=True, results="capacity/agents.json",
                                             started=now, ended=now, probe=replay_probe))
    rec.save(run_dir)
    return run_dir


def test_a_faster_box_does_not_read_as_an_unfaithful_replay(tmp_path: Path) -> None:
    lines, summary = bench().compare(run_folder(tmp_path, {"prefill_tps": 200.0, "decode_short_tps": 20.0}), 0.25)
    assert summary["turns"] == 3 and summary["normalised"] == [True, True]
    # raw, every replayed turn is half the original: outside ±25 %; on each side's probe, the same
    assert summary["prefill_within_raw"] == summary["decode_within_raw"] == 0
    assert summary["prefill_within"] == summary["decode_within"] == 3
    assert summary["prefill_ratio_p50"] == 1.0 and summary["decode_ratio_p50"] == 1.0
    text = "\n".join(lines)
    assert "x 2.000 (prefill) and x 2.000 (decode)" in text and "| 1.000 |" in text


def test_without_the_replay_sides_probe_the_raw_ratio_stands_and_says_so(tmp_path: Path) -> None:
    lines, summary = bench().compare(run_folder(tmp_path, None), 0.25)
    assert summary["normalised"] == [False, False] and summary["prefill_within"] == 0
    assert summary["prefill_ratio_p50"] == 0.5
    assert "no factor for prefill and decode: those ratios stand raw" in "\n".join(lines)
