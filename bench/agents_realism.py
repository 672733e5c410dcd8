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

Normalised by the box (issue 52): a CPU's timings move with what else the host runs, so a ratio
read raw says as much about the host's load as about the replay. Each side's timings are
compared after dividing by the speed its own probe measured on that box: the original's, the
launch's probe (`probe` on the record); the replay's, the same probe run again just before the
sweep (`capacity.probe`, harness/stages/capacity.py) or, with `--serve`, on the new serve before
its replay. A normalised ratio is (replay / original) x (replay's probe rate / original's):
prefill by the probe's prefill tok/s, decode by its short decode tok/s. Where a side has no
probe, the raw ratio stands and the table says so.

The replay's prompts are synthetic words, not the agent's text. What the server's prefix cache
holds between turns: the agent's next prompt holds its previous answer, which the server cached
as it wrote it. With `--feed-answers` (the default; `load-agents --feed-answers`, and what
`launch --capacity` replays with) each appending turn carries the answer the server gave the
replay's previous turn, so the cache holds it too; with `--no-feed-answers` a turn after the
first prefills the previous answer's length again. The cached tokens of each turn (the server's
usage, where it reports them) are set beside the original's. The host's load (os.getloadavg) is written beside the figures: this machine has
2 cores shared with other work, and CPU timing moves with it.

    .venv/bin/python bench/agents_realism.py RUN_DIR [RUN_DIR ...] [--tolerance 0.25]
    .venv/bin/python bench/agents_realism.py RUN_DIR --serve ENV PRESET [--sweep 1,2 --ttft-p99 S --turn-p99 S]

With `--serve`, for a run that made no sweep (one the smoke refused keeps the smoke's own wire
log, smoke/wire.jsonl: opencode's real request and the engine's real answer), the preset is
served here (`llms-benchmark serve`, destroyed after), one copy replayed the same way, and with
`--sweep` the agents sweep run on it for the capacity figure.

A run folder without a wire log or a capacity sweep exits 2 naming the file and the fix.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.errors import UserError  # noqa: E402
from harness.markdown_table import row, rule  # noqa: E402
from harness.load.agents.trace import AgentTrace, load  # noqa: E402
from harness.records.record import RunRecord  # noqa: E402

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
    # the first copy's first pass of the first repeat: the replay of the original, once
    by_key = {(t["session"], t["turn"]): t for t in one
              if t["copy"] == 0 and t.get("repeat", 0) == 0 and t.get("lap", 0) == 0}
    return rec, trace, [by_key.get((s.id, i)) for s in trace.sessions for i in range(len(s.turns))], sweep


def wire_of(run_dir: Path) -> Path:
    for path in (run_dir / "wire.jsonl", run_dir / "smoke" / "wire.jsonl"):
        if path.is_file():
            return path
    raise UserError(f"no wire log in {run_dir}", file=run_dir / "wire.jsonl",
                    fix="give a run folder the sandbox's bridge wrote a wire log into (not --no-sandbox)")


def replay_here(run_dir: Path, env: str, preset: str, sweep_levels: list[int], ttft: float, turn: float,
                limit: float, feed: bool) -> tuple[RunRecord, AgentTrace, list[dict], dict]:
    """Serve the preset, replay one copy of the run's wire log (and sweep), destroy."""
    import subprocess

    from harness.load.agents.replay import ReplayOptions, replay
    from harness.load.agents.run import run_agents
    from harness.load.agents.sweep import Slo
    from harness.load.agents.trace import from_wire

    rec = RunRecord.load(run_dir / "run.json")
    wire = wire_of(run_dir)
    trace = from_wire(wire, source=f"{rec.run_id}/{wire.relative_to(run_dir)}")
    cli = str(REPO / ".venv" / "bin" / "llms-benchmark")
    up = subprocess.run([cli, "serve", env, preset, "--json"], capture_output=True, text=True, cwd=REPO,
                        timeout=900, stdin=subprocess.DEVNULL)
    if up.returncode:
        raise UserError(f"could not serve {preset} on {env}: {up.stderr.strip()[-500:]}", field="--serve",
                        fix="check `llms-benchmark preflight ENV PRESET`")
    unit = json.loads(up.stdout)
    started = datetime.now(UTC)
    try:
        from harness.probe import run_probe

        long_target = (rec.probe.long_context_tokens if rec.probe and rec.probe.long_context_tokens else 2000)
        probe = run_probe(unit["base_url"], unit["served_name"], max_model_len=unit.get("max_model_len"),
                          long_target=long_target).model_dump(mode="json")
        result = replay(trace, ReplayOptions(base_url=unit["base_url"], model=unit["served_name"], copies=1,
                                             limit_s=limit, exact_tokens=True, salt=int(time.time()),
                                             warm_prefixes=True,  # the smoke's prefix, as the original had
                                             feed_answers=feed))
        one = result.as_dict()
        sweep = {"exact_tokens_by_level": {"1": result.exact_tokens}, "turns_by_level": {"1": one["turns"]},
                 "started": started, "ended": datetime.now(UTC), "engine": preset, "warmed": result.warmed,
                 "warm_errors": result.warm_errors, "feed_answers": feed, "probe": probe}
        if sweep_levels:
            outcome, path = run_agents(trace, base_url=unit["base_url"], model=unit["served_name"],
                                       levels=sweep_levels, slo=Slo(ttft_p99_s=ttft, turn_p99_s=turn), stagger_s=5,
                                       limit_s=limit, out_root=Path(tempfile.mkdtemp()), exact_tokens=True,
                                       warm_prefixes=True, feed_answers=feed)
            sweep["capacity"] = outcome.headline()
            sweep["levels"] = [(lv.copies, lv.passed, lv.ttft_p99_s, lv.turn_p99_s, lv.why) for lv in outcome.levels]
    finally:
        subprocess.run([cli, "destroy", env, preset], capture_output=True, text=True, cwd=REPO, timeout=300,
                       stdin=subprocess.DEVNULL)
    sweep["ended"] = datetime.now(UTC)
    return rec, trace, [next((t for t in one["turns"] if t["session"] == s.id and t["turn"] == i), None)
                        for s in trace.sessions for i in range(len(s.turns))], sweep


def ratio_ok(replay: float | None, original: float | None, tol: float, scale: float = 1.0) -> bool | None:
    if replay is None or original is None or original <= 0 or replay <= 0:
        return None
    r = replay / original * scale
    return 1 / (1 + tol) <= r <= 1 + tol


def box_scales(original: dict | None, replay: dict | None) -> tuple[float | None, float | None]:
    """(prefill, decode) factors that put the replay's timings on the original's box: the replay
    side's probe rate over the original's (a box twice as fast halves the replay's times; x2 undoes
    it). None where either side lacks that probe figure."""
    def rate(probe: dict | None, key: str) -> float | None:
        value = (probe or {}).get(key)
        return value if isinstance(value, (int, float)) and value > 0 else None

    def scale(key: str) -> float | None:
        o, r = rate(original, key), rate(replay, key)
        return r / o if o and r else None
    return scale("prefill_tps"), scale("decode_short_tps")


def unmeasured(run_dir: Path, why: str) -> tuple[list[str], dict]:
    """A run that left nothing to replay: what it did say of the engine (its probe), and why."""
    rec = RunRecord.load(run_dir / "run.json")
    p = rec.probe
    speeds = (f"its probe measured prefill {p.prefill_tps} tok/s, decode {p.decode_short_tps} tok/s short and "
              f"{p.decode_long_tps} tok/s at {p.long_context_tokens} tokens" if p else "no probe")
    engine = rec.engine.describe() if rec.engine else rec.stack
    try:
        rows = [json.loads(x) for x in wire_of(run_dir).read_text().splitlines() if x.strip()]
    except (UserError, ValueError):
        rows = []
    seen = "; ".join(f"{r.get('path')} status {r.get('status')}" + (f", cut after {r.get('seconds')} s with "
                     f"{r.get('content_chars')} characters of answer" if r.get("incomplete") else "")
                     for r in rows[:5]) or "none"
    why = f"{why.split(': ')[-1]} (the wire log's exchanges: {seen})"
    lines = [f"### {engine}: run `{rec.run_id}` — not measured", "",
             f"Preset `{rec.key.preset}` on `{rec.environment}` ({rec.status.value}, stopped at {rec.stopped_at}: "
             f"{(rec.reason or '').splitlines()[0][:300]}); {speeds}. Nothing to replay: {why}", ""]
    return lines, {"run": rec.run_id, "engine": engine, "turns": 0, "prompt_exact": 0, "prefill_within": 0,
                   "decode_within": 0, "prefill_ratio_p50": None, "decode_ratio_p50": None, "capacity": "—",
                   "unmeasured": why}


def compare(run_dir: Path, tol: float, serve: list[str] | None = None, sweep_levels: list[int] | None = None,
            ttft: float = 120, turn: float = 300, limit: float = 900, feed: bool = True) -> tuple[list[str], dict]:
    try:  # a run whose wire log holds no completed exchange left nothing to replay: said, not an error
        from harness.load.agents.trace import from_wire

        if serve or not (run_dir / "capacity" / "trace.jsonl").is_file():  # a committed sweep keeps its trace
            from_wire(wire_of(run_dir))
    except UserError as exc:
        if (run_dir / "run.json").is_file():
            return unmeasured(run_dir, exc.render().splitlines()[0])
    if serve:
        rec, trace, replayed, sweep = replay_here(run_dir, serve[0], serve[1], sweep_levels or [], ttft, turn, limit,
                                                  feed)
        when, capacity = (sweep["started"], sweep["ended"]), sweep.get("capacity") or "no sweep"
        how = (f"served again here after the run (`llms-benchmark serve {serve[0]} {serve[1]}`), the trace from "
               f"`{trace.source}`")
        warm_note = (f"`load-agents --warm-prefixes`: {sweep['warmed']} prefix(es), untimed"
                     + (f"; failed: {'; '.join(sweep['warm_errors'])}" if sweep["warm_errors"] else "")
                     if sweep["warmed"] or sweep["warm_errors"] else "")
    else:
        rec, trace, replayed, sweep = pairs(run_dir)
        when, capacity = (rec.capacity.started, rec.capacity.ended), rec.capacity.headline()
        how = "the `--capacity` sweep's first level on the same serve"
        warm_note = ("the `--capacity` sweep's own warm-up (`warm_prefixes`)" if sweep.get("warm_prefixes")
                     else "")  # a sweep from before it warmed started cold
        if rec.capacity.host_load:
            how += f"; host load average {' → '.join(f'{x:g}' for x in rec.capacity.host_load)} over it"
        sweep["probe"] = rec.capacity.probe
    original_probe = rec.probe.model_dump(mode="json") if rec.probe else None
    pre_scale, dec_scale = box_scales(original_probe, sweep.get("probe"))
    lines = [f"### {rec.engine.describe() if rec.engine else rec.stack}: run `{rec.run_id}`", "",
             f"Preset `{rec.key.preset}` ({rec.model}) on `{rec.environment}`, mission `{rec.mission}` "
             f"({rec.status.value}{', stopped at ' + rec.stopped_at if rec.stopped_at else ''}); the original: "
             f"{sum(len(s.turns) for s in trace.sessions)} turns in {len(trace.sessions)} session(s); replayed "
             f"{when[0]:%H:%M:%S}–{when[1]:%H:%M:%S} UTC ({how}), prompts sized on the server's tokenizer: "
             f"{sweep.get('exact_tokens_by_level', {}).get('1')}; previous answers fed: "
             f"{'yes' if sweep.get('feed_answers') else 'no'}.", "",
             "Normalised by each side's probe: " + _scales_note(original_probe, sweep.get("probe"), pre_scale,
                                                               dec_scale), "",
             row(["session", "turn", "prompt tokens (original)", "prompt tokens (replay)", "exact", "cached (original)",
                  "cached (replay)", "fed", "prefill s (original)", "prefill s (replay)", "ratio", "normalised",
                  "decode s (original)", "decode s (replay)", "ratio", "normalised", "output tokens"]),
             rule(17, spaced=True)]
    exact = pre_ok = dec_ok = n = cut = pre_raw_ok = dec_raw_ok = 0
    pre_r, dec_r = [], []
    cached_pairs: list[tuple[int, int]] = []  # (original, replay) cached tokens, where both are known
    k = 0
    for s in trace.sessions:
        for i, t in enumerate(s.turns):
            r = replayed[k]
            k += 1
            if not r or not r["ok"]:  # not replayed whole: cut at the level's limit, or failed
                cut += 1
                lines.append(row([s.id, i, t.prompt_tokens, "—",
                                  f"not replayed ({(r or {}).get('error') or 'never sent'})", *[""] * 11,
                                  t.output_tokens]))
                continue
            n += 1
            o_pre = t.ttft_s
            o_dec = (t.duration_s - t.ttft_s) if t.duration_s is not None and t.ttft_s is not None else None
            r_pre = r["ttft_s"] if r and r["ok"] else None
            r_dec = (r["turn_s"] - r["ttft_s"]) if r and r["ok"] and r["turn_s"] is not None else None
            same = bool(r and r["prompt_tokens"] == t.prompt_tokens)
            exact += same
            # judged normalised where both sides probed the box, raw otherwise (the note above says which)
            p = ratio_ok(r_pre, o_pre, tol, pre_scale or 1.0)
            d = ratio_ok(r_dec, o_dec, tol, dec_scale or 1.0)
            pre_ok += bool(p)
            dec_ok += bool(d)
            pre_raw_ok += bool(ratio_ok(r_pre, o_pre, tol))
            dec_raw_ok += bool(ratio_ok(r_dec, o_dec, tol))
            if r_pre and o_pre:
                pre_r.append(r_pre / o_pre * (pre_scale or 1.0))
            if r_dec and o_dec:
                dec_r.append(r_dec / o_dec * (dec_scale or 1.0))

            def f(v: float | None) -> str:
                return "—" if v is None else f"{v:.3f}"
            if t.cached_tokens is not None and r.get("cached_tokens") is not None:
                cached_pairs.append((t.cached_tokens, r["cached_tokens"]))
            lines.append(row([s.id, i, t.prompt_tokens, r["prompt_tokens"] if r else "—", "yes" if same else "no",
                              _n(t.cached_tokens), _n(r.get("cached_tokens")), "yes" if r.get("fed") else "no",
                              f(o_pre), f(r_pre), f(r_pre / o_pre) if r_pre and o_pre else "—",
                              f(r_pre / o_pre * pre_scale) if r_pre and o_pre and pre_scale else "—",
                              f(o_dec), f(r_dec), f(r_dec / o_dec) if r_dec and o_dec else "—",
                              f(r_dec / o_dec * dec_scale) if r_dec and o_dec and dec_scale else "—",
                              t.output_tokens]))
    probe = rec.probe.prefill_tps if rec.probe else None
    for s in trace.sessions:
        t = s.turns[0]
        if probe and t.ttft_s and t.prompt_tokens / t.ttft_s > 3 * probe:
            lines += ["", f"Session {s.id}'s first turn: {t.prompt_tokens} tokens before its first token in "
                      f"{t.ttft_s:.2f} s, an implied {t.prompt_tokens / t.ttft_s:,.0f} tok/s against the probe's "
                      f"prefill of {probe:g} tok/s on this serve: the original found most of its prompt already "
                      "in the server's prefix cache (opencode's system prompt and tool list, which its smoke and "
                      "earlier sessions sent: a prefix shared across sessions). "
                      + (f"The replay sent that prefix first ({warm_note}), so its first turn read it from the "
                         "cache too." if warm_note else
                         "The trace carries reuse within a session only, so the replay, whose copies share "
                         "nothing by design, prefilled it whole.")]
    summary = {"run": rec.run_id, "engine": rec.engine.describe() if rec.engine else rec.stack, "turns": n, "cut": cut,
               "prompt_exact": exact, "prefill_within": pre_ok, "decode_within": dec_ok,
               "normalised": [pre_scale is not None, dec_scale is not None],
               "prefill_within_raw": pre_raw_ok, "decode_within_raw": dec_raw_ok,
               "prefill_ratio_p50": statistics.median(pre_r) if pre_r else None,
               "decode_ratio_p50": statistics.median(dec_r) if dec_r else None,
               "capacity": capacity,
               "cached_original": sum(o for o, _ in cached_pairs) if cached_pairs else None,
               "cached_replay": sum(r for _, r in cached_pairs) if cached_pairs else None}
    lines += ["", (f"{cut} turn(s) not replayed whole (the level's wall-clock limit, or a failed request); "
                   f"the figures below are over the {n} replayed. " if cut else "")
              + f"Prompt tokens exact on {exact}/{n} turns; prefill within ±{tol:.0%} on {pre_ok}/{n} "
              f"({'normalised' if pre_scale else 'raw: no probe on one side'}; raw {pre_raw_ok}/{n}; median "
              f"ratio {summary['prefill_ratio_p50'] or float('nan'):.2f}); decode within ±{tol:.0%} on "
              f"{dec_ok}/{n} ({'normalised' if dec_scale else 'raw'}; raw {dec_raw_ok}/{n}; median ratio "
              f"{summary['decode_ratio_p50'] or float('nan'):.2f})."
              + (f" Cached prompt tokens over the {len(cached_pairs)} turns the server reported them for: "
                 f"{summary['cached_original']:,} in the original, {summary['cached_replay']:,} in the replay."
                 if cached_pairs else ""),
              f"Capacity: {capacity}."]
    for lv in sweep.get("levels") or []:
        if isinstance(lv, dict):  # agents.json's level
            lv = (lv["copies"], lv["passed"], lv["ttft_p99_s"], lv["turn_p99_s"], lv["why"])
        lines.append(f"- {lv[0]} agents: {'pass' if lv[1] else 'FAIL'} (TTFT p99 {lv[2]:.1f} s, turn p99 "
                     f"{lv[3]:.1f} s: {lv[4]})" if lv[2] is not None else f"- {lv[0]} agents: FAIL ({lv[4]})")
    lines.append("")
    return lines, summary


def _scales_note(original: dict | None, replay: dict | None, pre: float | None, dec: float | None) -> str:
    def side(p: dict | None) -> str:
        if not p:
            return "none"
        if p.get("error"):
            return f"failed ({p['error']})"
        return f"prefill {p.get('prefill_tps')} tok/s, decode {p.get('decode_short_tps')} tok/s"
    factors = (f"replay ratios x {pre:.3f} (prefill) and x {dec:.3f} (decode)" if pre and dec
               else "no factor for " + " and ".join(k for k, v in (("prefill", pre), ("decode", dec)) if not v)
               + ": those ratios stand raw")
    return f"the original's probe {side(original)}; the replay's {side(replay)}; {factors}."


def _n(v: int | None) -> str:
    return "—" if v is None else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders launched with --capacity")
    ap.add_argument("--tolerance", type=float, default=0.25, help="prefill/decode ratio bound (0.25: within ±25 %%)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--serve", nargs=2, metavar=("ENV", "PRESET"), action="append", default=[],
                    help="replay here on this preset, served for it (once per RUN_DIR, in order)")
    ap.add_argument("--sweep", default="", help="with --serve: the agents sweep's levels, e.g. 1,2")
    ap.add_argument("--ttft-p99", type=float, default=120.0)
    ap.add_argument("--turn-p99", type=float, default=300.0)
    ap.add_argument("--limit", type=float, default=900.0, help="one replay's wall-clock limit (s)")
    ap.add_argument("--feed-answers", action=argparse.BooleanOptionalAction, default=True,
                    help="with --serve: each appending turn carries the replay's previous answer (load-agents "
                         "--feed-answers)")
    args = ap.parse_args()
    if args.serve and len(args.serve) != len(args.runs):
        return _fail("give one --serve ENV PRESET per RUN_DIR")
    try:
        levels = [int(x) for x in args.sweep.split(",") if x.strip()]
    except ValueError:
        return _fail(f"--sweep {args.sweep!r} is not a list of integers (e.g. 1,2)")
    if not args.tolerance > 0:
        return _fail("--tolerance must be above 0 (e.g. 0.25)")
    sections, summaries = [], []
    try:
        for k, run in enumerate(args.runs):
            lines, summary = compare(run, args.tolerance, args.serve[k] if args.serve else None, levels,
                                     args.ttft_p99, args.turn_p99, args.limit, args.feed_answers)
            sections += lines
            summaries.append(summary)
    except UserError as exc:
        return _fail(exc.render())
    load1, load5, load15 = os.getloadavg()
    head = ["# Realism: one replayed copy against the original run, same engine", "",
            f"`.venv/bin/python bench/agents_realism.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` "
            f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC; host load average when written "
            f"{load1:.1f} / {load5:.1f} / {load15:.1f} over 1/5/15 min, on {os.cpu_count()} CPUs — the runs "
            "shared the machine with other work, so CPU timings carry that noise).", "",
            "Original: the run's own wire log (prefill = request start to first data, decode = first data to "
            "the end). Replay: one copy, its prompts sized on the server's own tokenizer: the `--capacity` "
            "sweep's first level on the same serve after the mission, or with `--serve` the preset served again "
            "here, each session's first-turn prefix that the original read from the server's cache sent first "
            "(untimed). A ratio is replay / original; "
            f"within ±{args.tolerance:.0%} means in [1/{1 + args.tolerance:g}, {1 + args.tolerance:g}].", "",
            "Prefill and decode are judged normalised by each side's probe where both sides have one (raw "
            "beside it): see each run's note.", "",
            row(["engine", "run", "turns", "prompt tokens exact", "prefill within (raw)", "decode within (raw)",
                 "prefill ratio p50", "decode ratio p50"]), rule(8, spaced=True)]
    for s in summaries:
        def r(v: float | None) -> str:
            return "—" if v is None else f"{v:.2f}"
        if s.get("unmeasured"):
            head.append(row([s["engine"], f"`{s['run']}`", "—", "not measured (below)", "—", "—", "—", "—"]))
            continue
        head.append(row([s["engine"], f"`{s['run']}`", f"{s['turns']}" + (f" (+{s['cut']} cut)" if s.get("cut") else ""),
                         f"{s['prompt_exact']}/{s['turns']}", f"{s['prefill_within']}/{s['turns']} ({s['prefill_within_raw']})",
                         f"{s['decode_within']}/{s['turns']} ({s['decode_within_raw']})",
                         r(s["prefill_ratio_p50"]), r(s["decode_ratio_p50"])]))
    head += ["", "What the server's cache holds between turns: the agent's next prompt holds its previous answer, "
             "which the server cached as it wrote it. With answers fed (`--feed-answers`, the default with "
             "`--serve`, and what `launch --capacity` replays with), the replay's next turn carries the answer the "
             "server wrote for the replay's own previous turn, so the cache holds it as it held the agent's; "
             "without, those output tokens are prefilled again. What can still differ: opencode sends an answer "
             "back as the template renders a tool call, ours as plain text re-tokenised, so the cached share can "
             "end earlier or later. The replay's answer is forced to the recorded length on a synthetic prompt, "
             "and greedy decoding then often writes a tokenisation that is not the tokeniser's own (\" water\" + "
             "\"ing\", which the text tokenises as \" watering\"), or, on llama.cpp, whose `ignore_eos` masks the "
             "end-of-generation tokens, a special token such as `<|im_start|>` that its streamed text leaves out: "
             "sent back as text, such an answer tokenises differently and the cache match ends there, so the next "
             "turn prefills the rest of the answer again. vLLM's end of turn comes back in the text, as the replay "
             "asks (`skip_special_tokens: false`); llama.cpp has no such field. `bench/agents_retokenize.py` "
             "measures how often (`bench/results/agents-retokenize.md`).", ""]
    args.out.write_text("\n".join(head + sections).rstrip() + "\n")
    print("\n".join(head[:len(head)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
