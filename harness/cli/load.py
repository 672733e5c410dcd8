"""`llms-benchmark load`: closed-loop load at several concurrency levels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.common import JsonOpt, comma_list, emit, err, project_root, require_trace_file, say, user_errors
from harness.errors import UserError
from harness.load.agents.slo import PRODUCT_MEASURE, PRODUCT_SLO


@user_errors
def load(
    target: Annotated[list[str] | None, typer.Argument(
        help="A base URL (http://127.0.0.1:8000), or ENVIRONMENT PRESET to serve for the run and destroy after.")] = None,
    base_url: Annotated[str, typer.Option("--base-url", help="The server's base URL (instead of TARGET).")] = "",
    model: Annotated[str, typer.Option("--model", help="Served model name (default: the first /v1/models lists).")] = "",
    concurrency: Annotated[list[str], typer.Option(help="Requests in flight per level, comma-separated.",
                                                   callback=comma_list, metavar="TEXT")] = ["1,8,16,24,40"],
    shapes: Annotated[list[str], typer.Option(help="Prompt shapes: short, long, or NAME=TOKENS items.",
                                              callback=comma_list, metavar="TEXT")] = ["short,long"],
    short_input: Annotated[int, typer.Option(help="Input tokens (about) of the short shape.")] = 512,
    long_input: Annotated[int, typer.Option(help="Input tokens (about) of the long shape.")] = 16_384,
    output_tokens: Annotated[int, typer.Option(help="Output tokens of every request (ignore_eos).")] = 256,
    requests: Annotated[int, typer.Option(help="Requests per level (0: max(level x rounds, min-requests)).")] = 0,
    rounds: Annotated[int, typer.Option(help="Requests per level = level x rounds ...")] = 2,
    min_requests: Annotated[int, typer.Option(help="... but at least this many.")] = 8,
    duration: Annotated[float, typer.Option(help="Seconds per level instead of a request count (0: off).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the prompts' filler words.")] = 20260929,
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="One short request first.")] = True,
    allow_busy: Annotated[bool, typer.Option("--allow-busy", help="Measure even with requests running or waiting.")
                          ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    idle_timeout: Annotated[float, typer.Option(help="Longest wait for an idle server before a level (s).")] = 180,
    timeout: Annotated[float, typer.Option(help="Per-read idle timeout of a request (s).")] = 900,
    sample_interval: Annotated[float, typer.Option(help="Seconds between /metrics samples in a level.")] = 1.0,
    out_dir: Annotated[Path | None, typer.Option(help="Parent of <UTC>/ (default ./bench-results).")] = None,
    api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Closed-loop load at several concurrency levels and prompt shapes; results in bench-results/<UTC>/."""
    import sys

    from harness.load.level_row import table_columns
    from harness.launcher.load_run import resolve_target, run_load
    from harness.load.progress import RichReporter
    from harness.load.runner import LoadOptions, parse_levels, parse_shapes
    from harness.probe import api_key_from_env

    where = resolve_target(target or [], base_url or None)
    numbers = {"--output-tokens": output_tokens, "--rounds": rounds, "--min-requests": min_requests,
               "--sample-interval": sample_interval, "--timeout": timeout}
    for name, value in numbers.items():
        if value <= 0:
            raise UserError(f"{name} must be positive (got {value})", field=name, fix=f"give {name} a number above 0")
    if requests < 0 or duration < 0 or idle_timeout < 0:
        raise UserError("--requests, --duration and --idle-timeout cannot be negative", field="--requests",
                        fix="give 0 (the default) or a positive number")
    opts = LoadOptions(base_url="", model=model or None, api_key=api_key_from_env(api_key_env or None),
                       levels=parse_levels(concurrency), shapes=parse_shapes(shapes, short_input, long_input),
                       output_tokens=output_tokens, requests=requests or None, rounds=rounds,
                       min_requests=min_requests, duration_s=duration or None, seed=seed, warmup=warmup,
                       allow_busy=allow_busy, idle_timeout_s=idle_timeout, request_timeout_s=timeout,
                       sample_interval_s=sample_interval, out_root=out_dir or project_root() / "bench-results")

    def confirm(plan: str) -> bool:
        err.print(plan, highlight=False)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise UserError("a load run needs confirmation", field="--yes",
                            fix="run it at a terminal to answer, or pass --yes")
        return typer.confirm("Put this load on the server?", default=False, err=True)

    with RichReporter(err) as reporter:
        try:
            outcome = run_load(project_root(), where, opts, confirm=confirm, reporter=reporter, say=say)
        except KeyboardInterrupt:  # Interrupted (SIGINT/SIGTERM) is one
            err.print("[bold red]interrupted[/bold red]; finished levels are kept", highlight=False)
            raise typer.Exit(130) from None
    if outcome.path is None:
        err.print("cancelled: nothing was sent", highlight=False)
        raise typer.Exit(1)
    data = {"results": str(outcome.path), "levels": outcome.rows}
    columns = table_columns()  # declared with the figures (harness/load/level_row.py)
    table = Table(*(header for header, _ in columns), title=f"load: {outcome.path}")
    for r in outcome.rows:
        table.add_row(*(cell(r) for _, cell in columns))
    emit(data, as_json, table)
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command()(load)
    register_agents(app)


@user_errors
def load_trace(
    source: Annotated[Path, typer.Argument(
        help="A run folder holding wire.jsonl, a wire.jsonl file, or an ATIF trajectory (any agent's .json).")],
    out: Annotated[Path, typer.Option("--out", help="Our trace file to write (*.trace.jsonl).")],
    block_size: Annotated[int, typer.Option(help="KV block size the prefix reuse is counted in.")] = 16,
    mooncake: Annotated[Path | None, typer.Option(
        help="Also write AIPerf's Mooncake trace here (run it with --isl-block-size BLOCK_SIZE).")] = None,
    weka: Annotated[Path | None, typer.Option(
        help="Also write the Weka/AgentX trace format into this folder (one file per root session).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """An agent trace from a run's wire log or any agent's ATIF trajectory: each session's turns, prefix reuse
    and think times."""
    from harness.load.agents.run import make_trace

    if block_size < 1:
        raise UserError(f"--block-size must be at least 1 (got {block_size})", field="--block-size",
                        fix="give 16 (vLLM's default)")
    trace = make_trace(source, out, block_size=block_size, mooncake=mooncake, weka_dir=weka)
    for note in trace.notes:  # what a conversion assumed (kept in the trace's notes too)
        err.print(f"[yellow]assumed[/yellow] {escape(note)}", highlight=False)
    table = Table("session", "parent", "turns", "prompt tokens (first..last)", "think p50 s", title=f"trace: {out}")
    for s in trace.sessions:
        thinks = sorted(t.think_s for t in s.turns if t.think_s is not None)
        span = f"{s.turns[0].prompt_tokens}..{s.turns[-1].prompt_tokens}"
        table.add_row(s.id, s.parent or "", str(len(s.turns)), span,
                      f"{thinks[len(thinks) // 2]:.3f}" if thinks else "")
    emit({"trace": str(out), "mooncake": str(mooncake) if mooncake else None, "weka": str(weka) if weka else None,
          "sessions": len(trace.sessions), "notes": trace.notes,
          "turns": sum(len(s.turns) for s in trace.sessions)}, as_json, table)


@user_errors
def load_agents(
    trace_files: Annotated[list[Path], typer.Argument(
        help="*.trace.jsonl files (llms-benchmark load-trace) or ATIF trajectories (.json, converted as load-trace "
             "does), or with --mooncake-block-size / --weka AIPerf's formats; each copy replays them all.")],
    base_url: Annotated[str, typer.Option("--base-url", help="The OpenAI-compatible server's base URL.")],
    model: Annotated[str, typer.Option("--model", help="Served model name (default: the first /v1/models lists).")
                     ] = "",
    copies: Annotated[list[str], typer.Option(help="Concurrent agents per level, comma-separated (ascending).",
                                              callback=comma_list, metavar="TEXT")] = ["1,2,4,8,16"],
    stagger: Annotated[float, typer.Option(help="Seconds between the starts of successive copies.")] = 1.0,
    ttft_p99: Annotated[float, typer.Option(help="SLO: TTFT p99 at most this many seconds (default: the "
                                                 "product's, harness/load/agents/slo.py).")] = PRODUCT_SLO.ttft_p99_s,
    turn_p99: Annotated[float, typer.Option(help="SLO: turn time (request to last token) p99 at most this (s).")
                        ] = PRODUCT_SLO.turn_p99_s,
    duration: Annotated[float, typer.Option(help="Steady state: seconds each level's copies recycle the trace, "
                                                 "after --warmup (0: each copy runs it once).")
                        ] = PRODUCT_MEASURE.duration_s,
    warmup: Annotated[float, typer.Option(help="Steady state: seconds of turns sent before the measured window.")
                      ] = PRODUCT_MEASURE.warmup_s,
    repeats: Annotated[int, typer.Option(help="Runs of each level; 2 or more give each figure a 95 % interval, "
                                              "and a level passes only when its interval does.")
                       ] = PRODUCT_MEASURE.repeats,
    bisect: Annotated[bool, typer.Option("--bisect/--no-bisect", help="Bisect between the last pass and first fail."
                                         )] = True,
    limit: Annotated[float, typer.Option(help="Wall-clock limit of one level (s); unfinished turns fail it.")
                     ] = 1800.0,
    mooncake_block_size: Annotated[int | None, typer.Option(
        help="Read TRACE_FILE as AIPerf's Mooncake format with this block size.")] = None,
    weka: Annotated[bool, typer.Option("--weka", help="Read TRACE_FILE (a file or folder) as Weka/AgentX traces.")
                    ] = False,
    out_dir: Annotated[Path | None, typer.Option(help="Parent of <UTC>-agents/ (default ./bench-results).")] = None,
    sample_interval: Annotated[float, typer.Option(help="Seconds between /metrics readings in a level.")] = 1.0,
    warm_prefixes: Annotated[bool, typer.Option(
        "--warm-prefixes", help="Before each level, send each copy's sessions the first-turn prefix the recorded "
                                "server had cached (another session's, e.g. the smoke's), untimed.")] = False,
    feed_answers: Annotated[bool, typer.Option(
        "--feed-answers", help="Send each turn that appends to its session's previous prompt with the answer the "
                               "server gave that copy before (an assistant message), as the agent did: the server's "
                               "cache then holds it, as it held the agent's.")] = False,
    exact_tokens: Annotated[bool, typer.Option(
        "--exact-tokens", help="Size each copy's prompts on the server's own tokenizer (vLLM's /tokenize, "
                               "llama.cpp's /apply-template + /tokenize) to the recorded prompt tokens, before the "
                               "level; without it, or where the server has none, one word a token.")] = False,
    api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """N concurrent copies of an agent trace; the number of agents sustained under a TTFT/turn-time SLO."""
    from harness.load.agents.run import read_trace, run_agents
    from harness.load.agents.slo import Slo, check_measure
    from harness.load.agents.trace import merge
    from harness.probe import api_key_from_env

    try:
        levels = sorted({int(x) for x in copies})
    except ValueError:
        raise UserError(f"--copies {','.join(copies)!r} is not a list of integers", field="--copies",
                        fix="e.g. 1,2,4,8") from None
    for name, value in {"--copies": min(levels, default=0), "--ttft-p99": ttft_p99, "--turn-p99": turn_p99,
                        "--limit": limit, "--sample-interval": sample_interval}.items():
        if value <= 0:
            raise UserError(f"{name} must be positive (got {value})", field=name, fix=f"give {name} above 0")
    if stagger < 0:
        raise UserError("--stagger cannot be negative", field="--stagger", fix="give 0 or more seconds")
    measure = check_measure(duration, warmup, repeats, limit, prefix="--")
    if weka and mooncake_block_size is not None:
        raise UserError("give --weka or --mooncake-block-size, not both", field="--weka",
                        fix="name the one format the trace files are in")
    if not weka and mooncake_block_size is None:
        for f in trace_files:
            require_trace_file(f, "TRACE_FILES")
    trace = merge([read_trace(f, mooncake_block_size=mooncake_block_size, is_weka=weka) for f in trace_files])
    for note in trace.notes:
        err.print(f"[yellow]assumed[/yellow] {escape(note)}", highlight=False)
    slo = Slo(ttft_p99_s=ttft_p99, turn_p99_s=turn_p99)
    say(f"load-agents: {len(trace_files)} trace(s), {len(trace.sessions)} sessions a copy, at {base_url}; "
        f"SLO: {slo.describe()}; {measure.describe()}")
    try:
        outcome, path = run_agents(trace, base_url=base_url, model=model, levels=levels, slo=slo, stagger_s=stagger,
                                   limit_s=limit, out_root=out_dir or project_root() / "bench-results",
                                   api_key=api_key_from_env(api_key_env or None), bisect=bisect,
                                   sample_interval_s=sample_interval, warm_prefixes=warm_prefixes,
                                   feed_answers=feed_answers, exact_tokens=exact_tokens, measure=measure,
                                   on_level=lambda lv: say(f"  {lv.copies} agents: {lv.verdict} ({lv.why})"))
    except KeyboardInterrupt:
        err.print("[bold red]interrupted[/bold red]; no sweep result written", highlight=False)
        raise typer.Exit(130) from None

    def s(v: float | None) -> str:
        return "" if v is None else f"{v:.3f}"
    def server(lv, key: str, fmt: str) -> str:
        value = (lv.server or {}).get(key)
        return "" if value is None else format(value, fmt)
    def band(iv: list[float] | None) -> str:
        return "" if iv is None else f"{iv[0]:.3f}-{iv[1]:.3f}"
    table = Table("agents", "turns", "failed", "faults", "stat", "TTFT p50 s", "TTFT stat s", "TTFT 95% s",
                  "turn p50 s", "turn stat s", "turn 95% s", "ITL p50 ms", "req/s", "out tok/s", "goodput/s",
                  "prefix hit", "KV peak", "preempt", "verdict", title=outcome.headline())
    for lv in outcome.levels:
        table.add_row(str(lv.copies), str(lv.turns), str(lv.failed), str(lv.faults), lv.stat, s(lv.ttft_p50_s),
                      s(lv.ttft_p99_s), band(lv.ttft_interval_s), s(lv.turn_p50_s), s(lv.turn_p99_s),
                      band(lv.turn_interval_s),
                      "" if lv.inter_token_latency_p50_s is None else f"{lv.inter_token_latency_p50_s * 1000:.2f}",
                      s(lv.request_throughput_per_s), s(lv.output_token_throughput_per_s), s(lv.goodput_per_s),
                      server(lv, "prefix_cache_hit", ".1%"), server(lv, "kv_usage_peak", ".1%"),
                      server(lv, "preemptions", "g"), lv.verdict)
    emit({"results": str(path), **outcome.as_dict()}, as_json, table)
    if outcome.ended_by:
        err.print(f"load-agents: the sweep ended: {outcome.ended_by}", highlight=False)
    raise typer.Exit(0 if outcome.sustained and not outcome.ended_by else 1)


def register_agents(app: typer.Typer) -> None:
    app.command("load-trace")(load_trace)
    app.command("load-agents")(load_agents)
