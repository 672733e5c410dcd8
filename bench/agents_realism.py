"""Realism, measured (issue 37 item 4): does one replayed copy of a run's own sessions, against
the same engine, reproduce the original run turn by turn?

Reads run folders launched with `--capacity` (harness/stages/capacity.py): the original is the
run's own wire log (what the agent sent and the server answered: prompt tokens from its usage,
prefill = request start to first data, decode = first data to the end), the replay is the
sweep's first level, one copy, on the same serve minutes later (capacity/agents.json: its
prompts sized on the server's own tokenizer, harness/load/agents/exact.py; its usage, TTFT and
turn time as our client measured them). Per turn:

- prompt tokens: the server's count of the replayed prompt against the recorded one, exact;
- prefill and decode time: replay / original, within `--tolerance` (a ratio in [1/(1+t), 1+t]).

The replay's prompts are synthetic words, not the agent's text: what the server's prefix cache
holds between turns differs by the previous answer (the agent's next prompt holds it; ours holds
the previous prompt only), so a turn after the first prefills that many more tokens than the
original did. The host's load (os.getloadavg) is written beside the figures: this machine has
2 cores shared with other work, and CPU timing moves with it.

    .venv/bin/python bench/agents_realism.py RUN_DIR [RUN_DIR ...] [--tolerance 0.25]

A run folder without a wire log or a capacity sweep exits 2 naming the file and the fix.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.errors import UserError  # noqa: E402
from harness.load.agents.trace import AgentTrace, load  # noqa: E402
from harness.record import RunRecord  # noqa: E402

OUT = REPO / "bench" / "results" / "agents-realism.md"


def _fail(message: str) -> int:
    print(f"agents_realism: {message}", file=sys.stderr)
    return 2


def pairs(run_dir: Path) -> tuple[RunRecord, AgentTrace, list[dict], dict]:
    """(record, the original's trace, the replayed copy's turns in trace order, the sweep's file)."""
    record_path = run_dir / "run.json"
    if not record_path.is_file():
        raise UserError(f"no run record at {record_path}", file=record_path, fix="give a run folder")
    rec = RunRecord.load(record_path)
    if rec.capacity is None or not rec.capacity.results:
        raise UserError(f"run {rec.run_id} has no capacity sweep", file=record_path, field="capacity",
                        fix="launch it with --capacity (its first level, one copy, is the replay compared here)")
    results = run_dir / rec.capacity.results
    trace_file = run_dir / "capacity" / "trace.jsonl"
    for path in (results, trace_file):
        if not path.is_file():
            raise UserError(f"missing {path}", file=path, fix="the run folder must keep its capacity/ folder")
    sweep = json.loads(results.read_text())
    trace = load(trace_file)
    one = sweep["turns_by_level"].get("1")
    if not one:
        raise UserError(f"{results}: no level of one copy", file=results, field="turns_by_level",
                        fix="launch with --capacity-copies starting at 1")
    by_key = {(t["session"], t["turn"]): t for t in one if t["copy"] == 0}
    return rec, trace, [by_key.get((s.id, i)) for s in trace.sessions for i in range(len(s.turns))], sweep


def ratio_ok(replay: float | None, original: float | None, tol: float) -> bool | None:
    if replay is None or original is None or original <= 0 or replay <= 0:
        return None
    r = replay / original
    return 1 / (1 + tol) <= r <= 1 + tol


def compare(run_dir: Path, tol: float) -> tuple[list[str], dict]:
    rec, trace, replayed, sweep = pairs(run_dir)
    lines = [f"### {rec.engine.describe() if rec.engine else rec.stack}: run `{rec.run_id}`", "",
             f"Preset `{rec.key.preset}` ({rec.model}) on `{rec.environment}`, mission `{rec.mission}` "
             f"({rec.status.value}); the original: {sum(len(s.turns) for s in trace.sessions)} turns in "
             f"{len(trace.sessions)} session(s); replayed {rec.capacity.started:%H:%M:%S}–{rec.capacity.ended:%H:%M:%S} "
             f"UTC, prompts sized on the server's tokenizer: {sweep.get('exact_tokens_by_level', {}).get('1')}.", "",
             "| session | turn | prompt tokens (original) | prompt tokens (replay) | exact | prefill s (original) "
             "| prefill s (replay) | ratio | decode s (original) | decode s (replay) | ratio | output tokens |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    exact = pre_ok = dec_ok = n = 0
    pre_r, dec_r = [], []
    k = 0
    for s in trace.sessions:
        for i, t in enumerate(s.turns):
            r = replayed[k]
            k += 1
            n += 1
            o_pre = t.ttft_s
            o_dec = (t.duration_s - t.ttft_s) if t.duration_s is not None and t.ttft_s is not None else None
            r_pre = r["ttft_s"] if r and r["ok"] else None
            r_dec = (r["turn_s"] - r["ttft_s"]) if r and r["ok"] and r["turn_s"] is not None else None
            same = bool(r and r["prompt_tokens"] == t.prompt_tokens)
            exact += same
            p, d = ratio_ok(r_pre, o_pre, tol), ratio_ok(r_dec, o_dec, tol)
            pre_ok += bool(p)
            dec_ok += bool(d)
            if r_pre and o_pre:
                pre_r.append(r_pre / o_pre)
            if r_dec and o_dec:
                dec_r.append(r_dec / o_dec)

            def f(v: float | None) -> str:
                return "—" if v is None else f"{v:.3f}"
            lines.append(f"| {s.id} | {i} | {t.prompt_tokens} | {r['prompt_tokens'] if r else '—'} | "
                         f"{'yes' if same else 'no'} | {f(o_pre)} | {f(r_pre)} | "
                         f"{f(r_pre / o_pre) if r_pre and o_pre else '—'} | {f(o_dec)} | {f(r_dec)} | "
                         f"{f(r_dec / o_dec) if r_dec and o_dec else '—'} | {t.output_tokens} |")
    summary = {"run": rec.run_id, "engine": rec.engine.describe() if rec.engine else rec.stack, "turns": n,
               "prompt_exact": exact, "prefill_within": pre_ok, "decode_within": dec_ok,
               "prefill_ratio_p50": statistics.median(pre_r) if pre_r else None,
               "decode_ratio_p50": statistics.median(dec_r) if dec_r else None,
               "capacity": rec.capacity.headline()}
    lines += ["", f"Prompt tokens exact on {exact}/{n} turns; prefill within ±{tol:.0%} on {pre_ok}/{n} "
              f"(median ratio {summary['prefill_ratio_p50'] or float('nan'):.2f}); decode within ±{tol:.0%} on "
              f"{dec_ok}/{n} (median ratio {summary['decode_ratio_p50'] or float('nan'):.2f}).",
              f"Capacity on the same serve: {rec.capacity.headline()}.", ""]
    return lines, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders launched with --capacity")
    ap.add_argument("--tolerance", type=float, default=0.25, help="prefill/decode ratio bound (0.25: within ±25 %%)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.tolerance > 0:
        return _fail("--tolerance must be above 0 (e.g. 0.25)")
    sections, summaries = [], []
    try:
        for run in args.runs:
            lines, summary = compare(run, args.tolerance)
            sections += lines
            summaries.append(summary)
    except UserError as exc:
        return _fail(exc.render())
    load1, load5, load15 = os.getloadavg()
    head = ["# Realism: one replayed copy against the original run, same engine", "",
            f"`.venv/bin/python bench/agents_realism.py {' '.join(str(r) for r in args.runs)} --tolerance "
            f"{args.tolerance:g}` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC; host load average when written "
            f"{load1:.1f} / {load5:.1f} / {load15:.1f} over 1/5/15 min, on {os.cpu_count()} CPUs — the runs "
            "shared the machine with other work, so CPU timings carry that noise).", "",
            "Original: the run's own wire log (prefill = request start to first data, decode = first data to "
            "the end). Replay: the `--capacity` sweep's first level, one copy, on the same serve after the "
            "mission, its prompts sized on the server's own tokenizer. A ratio is replay / original; "
            f"within ±{args.tolerance:.0%} means in [1/{1 + args.tolerance:g}, {1 + args.tolerance:g}].", "",
            "| engine | run | turns | prompt tokens exact | prefill within | decode within | prefill ratio p50 "
            "| decode ratio p50 |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summaries:
        def r(v: float | None) -> str:
            return "—" if v is None else f"{v:.2f}"
        head.append(f"| {s['engine']} | `{s['run']}` | {s['turns']} | {s['prompt_exact']}/{s['turns']} | "
                    f"{s['prefill_within']}/{s['turns']} | {s['decode_within']}/{s['turns']} | "
                    f"{r(s['prefill_ratio_p50'])} | {r(s['decode_ratio_p50'])} |")
    head += ["", "Why a replayed turn may prefill more than the original: the agent's next prompt holds its "
             "previous answer, which the server's prefix cache already holds; our synthetic next prompt holds "
             "the previous prompt but not the answer the server generated for it (ignore_eos, the recorded "
             "length), so those output tokens are prefilled again. The first turn of a session has no such "
             "difference.", ""]
    args.out.write_text("\n".join(head + sections).rstrip() + "\n")
    print("\n".join(head[:len(head)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
