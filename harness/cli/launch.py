"""`llms-benchmark launch`: run the benchmark end to end.

Every argument is checked before anything happens (no run folder, nothing served): the
environment, preset and mission are names (never paths), the effort is one opencode accepts,
the numbers are in range, no `--capacity-*` without `--capacity`; with `--detach` their files
also load and validate here, before the background launch starts. A launch the preflight
refuses (nothing served) keeps its record out of git, under `.llms-benchmark/refused/<run-id>/`
with its reason. `--detach` starts the launch in the background and returns once its preflight
passed, printing its run id and record path (`llms-benchmark wait RUN` waits); a launch its
preflight refuses exits 2 there and then with the refusal and where its record lies, so the record
`--detach` names is always where it will stay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated

import psutil
import typer
from rich.markup import escape

from harness.cli.common import JsonOpt, err, out, project_root, require_trace_file, say, user_errors
from harness.errors import UserError
from harness.load.agents.slo import PRODUCT_MEASURE, PRODUCT_SLO
from harness.mission import DEFAULT_MISSION
from harness.run.inputs import ACCEPTED_EFFORTS, ANNOUNCE_VAR, check_launch_inputs
from harness.records.paths import ProjectPaths
from harness.escape import one_line


MAX_TRIALS = 20  # each trial is a whole mission run on the serve: bounded
ANNOUNCE_WAIT_S = 120.0  # how long `--detach` waits for the run id before it gives up
# How long `--detach` waits for the background launch's preflight to pass or refuse it (within an
# agent's 2-minute tool limit); past it, it returns with no record path (`wait` finds the record).
PREFLIGHT_WAIT_S = 90.0

app = typer.Typer(no_args_is_help=True, help="Run the benchmark end to end.")


def check_launch_files(root: Path, environment: str, preset: str, mission: str) -> None:
    """Refuse, before anything is written or served, what the preflight would refuse from the files
    alone: a name whose file does not exist or does not validate (the environment, the preset
    resolved for the environment's stack, the mission), a variable the preset needs and this shell
    lacks, a preset the agent cannot drive the mission with, and a scripted trajectory with no
    scenario for the mission (a `--detach` launch would otherwise start, be refused in the
    background and move its record out of `runs/`)."""
    from harness.mission import load_mission
    from harness.run.preflight import check_preset_for_agent
    from harness.stacks.registry import get_stack
    from harness.vot.environment import load_environment
    from harness.vot.preset import load_preset, missing_env
    from harness.errors import PreflightError

    env = load_environment(root, environment)
    found = load_preset(root, preset)
    try:
        resolved = found.resolve(env.stack)
    except ValueError as exc:
        raise UserError(str(exc), file=found.path, field="stacks", fix="name a stack the harness knows") from None
    loaded = load_mission(root, mission)
    missing = missing_env(resolved)
    if missing:
        raise PreflightError(
            f"the preset needs {', '.join(missing)} exported in this shell (values are passed by name, never stored)",
            file=resolved.path, field="env", fix=f"export {missing[0]}=... before launching")
    check_preset_for_agent(resolved, loaded)
    stack = get_stack(env.stack, root)
    check_mission = getattr(stack, "check_mission", None)  # a stack whose model is a script (replay)
    if check_mission is not None:
        check_mission(resolved, loaded)


# The long-context probe's prompt: 0 (the default size) or a size a context can hold.
PROBE_LONG_MIN, PROBE_LONG_MAX = 1024, 1_048_576


def _probe_long_tokens(value: int) -> int:
    if value != 0 and not PROBE_LONG_MIN <= value <= PROBE_LONG_MAX:
        raise typer.BadParameter(
            f"{value} tokens is no long-context prompt: give 0 (82k where the context allows) or "
            f"{PROBE_LONG_MIN}..{PROBE_LONG_MAX:,} (the probe caps it at the served context)")
    return value


# Options that only mean something with --capacity: given without it, they would be ignored.
CAPACITY_OPTIONS = ("capacity_copies", "capacity_ttft_p99", "capacity_turn_p99", "capacity_stagger",
                    "capacity_limit", "capacity_trace")


def check_capacity_options_used(ctx: typer.Context, capacity: bool) -> None:
    """Refuse a --capacity-* option given without --capacity (it would be silently ignored)."""
    if capacity:
        return
    given = [name for name in CAPACITY_OPTIONS
             if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]
    if given:
        option = "--" + given[0].replace("_", "-")
        raise UserError(f"{option} only applies to a capacity sweep, and none was asked for", field=option,
                        fix=f"add --capacity to sweep after the mission, or leave {option} out")


def effort_note(root: Path, environment: str, preset: str, effort: str) -> str | None:
    """What the effort becomes on this preset, when it is not what was asked: a model whose
    template reads no reasoning effort gets no `--variant` (its row reads `default`). None when
    the effort applies as asked, or the preset cannot be read (the preflight then says why)."""
    from harness.opencode.config import takes_reasoning_effort
    from harness.vot.environment import load_environment
    from harness.vot.preset import load_preset

    if effort == "default":
        return None
    try:
        resolved = load_preset(root, preset).resolve(load_environment(root, environment).stack)
    except (UserError, OSError, ValueError):
        return None
    if takes_reasoning_effort(resolved.reasoning_parser):
        return None
    return (f"effort {effort}: {preset}'s model takes no reasoning effort (no variant in opencode), so it runs "
            "at its own default and the row reads `default`")


def keep_refusal_out_of_git(root: Path, record) -> Path | None:
    """A launch the preflight refused served nothing and makes no row: its run folder moves to
    `.llms-benchmark/refused/` (ignored by git), its record saying why. Returns the new record path."""
    from harness.records.record import Status

    if record.status != Status.refused or record.stopped_at != "preflight" or record.times.serve_start:
        return None
    paths = ProjectPaths(root)
    source = paths.run(record.run_id).dir
    if not source.is_dir():
        return None
    paths.refused.mkdir(parents=True, exist_ok=True)
    dest = paths.refused / record.run_id
    shutil.move(str(source), str(dest))
    return dest / "run.json"


@app.command("local")
@user_errors
def launch_local_cmd(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(help="A .vot/environments/<name>.yaml name.")],
    preset: Annotated[str, typer.Argument(help="A .vot/presets/<name>.yaml name.")],
    effort: Annotated[str, typer.Argument(
        help=f"Reasoning effort: {', '.join(ACCEPTED_EFFORTS)} (a model with no such variant runs at its default).")
    ] = "medium",
    mission: Annotated[str, typer.Option(help="Mission under missions/.")] = DEFAULT_MISSION,
    probe_long_tokens: Annotated[int, typer.Option(
        callback=_probe_long_tokens,
        help=f"Long-context probe size: 0 (82k where the context allows) or {PROBE_LONG_MIN}..{PROBE_LONG_MAX}.")] = 0,
    no_sandbox: Annotated[bool, typer.Option(
        "--no-sandbox", help="Run the agent unconfined (the record and the results row say so).")] = False,
    stop_after_report: Annotated[int, typer.Option(
        min=0, help="End the run once its report has stood N model turns unchanged (0: never); it still counts. "
                    "`llms-benchmark stop RUN` does the same by hand.")] = 0,
    trials: Annotated[int, typer.Option(
        min=1, max=MAX_TRIALS, help="Run the mission K times on one serve (probed and smoked once), each trial "
                                    "on a fresh workspace, store and mission stack, each its own run record.")] = 1,
    capacity: Annotated[bool, typer.Option(
        "--capacity", help="After the trials, before the destroy: how many concurrent agents the serve sustains "
                           "(the run's own sessions replayed as load, `load-agents`' sweep); on the record and "
                           "the results page.")] = False,
    capacity_copies: Annotated[str, typer.Option(help="--capacity: agents per level, comma-separated.")] = "1,2,4,8",
    capacity_ttft_p99: Annotated[float, typer.Option(
        help="--capacity SLO: TTFT p99 at most this (s); default the product's (harness/load/agents/slo.py).")
    ] = PRODUCT_SLO.ttft_p99_s,
    capacity_turn_p99: Annotated[float, typer.Option(help="--capacity SLO: turn time p99 at most this (s).")
                                 ] = PRODUCT_SLO.turn_p99_s,
    capacity_duration: Annotated[float, typer.Option(
        help="--capacity: seconds of steady state a level's copies recycle the trace (0: each runs it once).")
    ] = PRODUCT_MEASURE.duration_s,
    capacity_warmup: Annotated[float, typer.Option(help="--capacity: seconds of warm-up before that window.")
                               ] = PRODUCT_MEASURE.warmup_s,
    capacity_repeats: Annotated[int, typer.Option(
        help="--capacity: runs of each level (2+: a 95 % interval, and a level passes only when it does).")
    ] = PRODUCT_MEASURE.repeats,
    capacity_stagger: Annotated[float, typer.Option(help="--capacity: seconds between copies' starts.")] = 1.0,
    capacity_limit: Annotated[float, typer.Option(help="--capacity: wall-clock limit of one level (s).")] = 900.0,
    capacity_trace: Annotated[Path | None, typer.Option(
        help="--capacity: replay this *.trace.jsonl instead of the run's own wire log.")] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", help="Start the launch in the background; once its preflight passed (seconds), print its run "
                         "id and record path (then `llms-benchmark wait RUN`); a refusal exits 2 there and then.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Serve PRESET on ENVIRONMENT once, probe it, run the mission with opencode, destroy, record."""
    root = project_root()
    check_launch_inputs(root, environment, preset, effort, mission)
    check_capacity_options_used(ctx, capacity)
    cap = None
    if capacity:
        from harness.load.agents.slo import Measure
        from harness.stages.capacity import CapacityOptions, check_options, parse_copies

        if capacity_trace is not None:
            require_trace_file(capacity_trace, "--capacity-trace")
        cap = CapacityOptions(copies=parse_copies(capacity_copies), ttft_p99_s=capacity_ttft_p99,
                              turn_p99_s=capacity_turn_p99, stagger_s=capacity_stagger, limit_s=capacity_limit,
                              trace=capacity_trace.resolve() if capacity_trace else None,
                              measure=Measure(duration_s=capacity_duration, warmup_s=capacity_warmup,
                                              repeats=capacity_repeats))
        check_options(cap)
    note = effort_note(root, environment, preset, effort)
    if note:
        say(note)
    if detach:
        # Here, not in the background: the child's refusal would reach no one (its parent exits 0).
        # In the foreground the preflight refuses the same files and keeps the refusal's record.
        check_launch_files(root, environment, preset, mission)
        argv = [environment, preset, effort, "--mission", mission, "--probe-long-tokens", str(probe_long_tokens),
                "--stop-after-report", str(stop_after_report), "--trials", str(trials),
                *(["--no-sandbox"] if no_sandbox else [])]
        if cap is not None:
            argv += ["--capacity", "--capacity-copies", ",".join(map(str, cap.copies)), "--capacity-ttft-p99",
                     str(cap.ttft_p99_s), "--capacity-turn-p99", str(cap.turn_p99_s), "--capacity-stagger",
                     str(cap.stagger_s), "--capacity-limit", str(cap.limit_s), "--capacity-duration",
                     str(cap.measure.duration_s), "--capacity-warmup", str(cap.measure.warmup_s),
                     "--capacity-repeats", str(cap.measure.repeats),
                     *(["--capacity-trace", str(cap.trace)] if cap.trace else [])]
        _detach(root, argv, as_json)
        return

    from harness.launcher.launch import Launch, LaunchOptions
    from harness.run.summary import run_summary_table

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    launch = Launch(LaunchOptions(root, environment, preset, effort, mission, probe_long_tokens or None,
                                  sandbox=not no_sandbox, stop_after_report=stop_after_report or None,
                                  trials=trials), say, capacity=cap)
    _announce(launch.record.run_id)
    launch.run()
    records = launch.records
    moved = keep_refusal_out_of_git(root, records[0])
    if as_json:
        # One trial: its record, as ever; K trials: the list of their records.
        out.print_json(records[0].model_dump_json() if trials == 1
                       else "[" + ",".join(r.model_dump_json() for r in records) + "]")
    else:
        for record in records:
            out.print(run_summary_table(record, _rel(root, moved) if moved and record is records[0] else None))
    for record in records:
        if record.reason:
            where = f" (trial {record.trial.index})" if record.trial else ""
            err.print(f"[bold red]{record.status.value}{where}:[/bold red] {escape(one_line(record.reason or ''))}",
                      highlight=False)
    if moved is not None:
        say(f"nothing was served; the refused launch's record is kept out of git at {_rel(root, moved)}")
    if trials > 1 and len(records) < trials:
        err.print(f"[bold red]{len(records)} of {trials} trials ran[/bold red]: the launch ended in trial "
                  f"{len(records)}", highlight=False)
    # The worst trial's exit code: 0 only when every trial asked for made a row.
    raise typer.Exit(max(r.status.exit_code for r in records))


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _announce(run_id: str) -> None:
    """In the child of `--detach`: tell the parent the run id (an atomic write)."""
    target = os.environ.get(ANNOUNCE_VAR)
    if not target:
        return
    tmp = f"{target}.tmp"
    with open(tmp, "w") as fh:
        fh.write(run_id + "\n")
    os.replace(tmp, target)


def _detach(root: Path, argv: list[str], as_json: bool) -> None:
    """Start `launch local ARGV --json` in a session of its own (it outlives this command and the
    caller's terminal), its output in `.llms-benchmark/launches/`; print its run id once known."""
    paths = ProjectPaths(root)
    paths.launches.mkdir(parents=True, exist_ok=True)
    stamp = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    log = paths.launches / f"{stamp}.log"
    announce = paths.launches / f"{stamp}.run-id"
    env = {**os.environ, ANNOUNCE_VAR: str(announce), "LLMS_BENCHMARK_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as fh:
        child = subprocess.Popen([sys.executable, "-m", "harness.cli", "launch", "local", *argv, "--json"],
                                 cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                 start_new_session=True)
    started = time.monotonic()
    deadline = started + ANNOUNCE_WAIT_S
    while not announce.is_file() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not announce.is_file():
        tail = log.read_text(errors="replace")[-2000:]
        if child.poll() is None:
            raise UserError(f"the background launch (pid {child.pid}) named no run within {ANNOUNCE_WAIT_S:.0f}s; "
                            f"its output so far:\n{tail}", file=log,
                            fix=f"read {log}; end it with `kill -INT {child.pid}` (it destroys what it served)")
        err.print(tail, end="", highlight=False, markup=False)
        raise typer.Exit(child.returncode)
    run_id = announce.read_text().strip()
    announce.unlink(missing_ok=True)
    launcher = paths.launches / f"{run_id}.json"
    try:  # before the child can be reaped: its pid is ours, not a reused one
        created = psutil.Process(child.pid).create_time() if child.poll() is None else None
    except psutil.Error:  # it ended already: `wait` then reads its record
        created = None
    facts = {"run_id": run_id, "pid": child.pid, "created": created, "record": None,
             "log": _rel(root, log), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    launcher.write_text(json.dumps(facts) + "\n")  # what `wait` reads: on file before any wait can be asked
    record, passed = _await_preflight(paths, run_id, child, started + PREFLIGHT_WAIT_S)
    facts["record"] = _rel(root, record) if record else None
    launcher.write_text(json.dumps(facts) + "\n")
    code = child.poll()
    if not passed and code is not None:
        # Ended before it served (the preflight refused it, or it failed there): said now, with its
        # code and where its record lies, never as a launch going on.
        _print_ended(root, facts, record, code, as_json)
        raise typer.Exit(code)
    if not passed:
        facts["preflight"] = f"still running after {PREFLIGHT_WAIT_S:.0f}s: `llms-benchmark wait {run_id}` names the record"
    if as_json:
        out.print_json(json.dumps(facts))
    else:
        out.print(f"run {run_id} launched in the background (pid {child.pid})\n"
                  f"  record: {facts['record'] or facts['preflight']}\n  log:    {facts['log']}\n"
                  f"  wait:   llms-benchmark wait {run_id} --timeout 100", highlight=False, soft_wrap=True)


def _await_preflight(paths: ProjectPaths, run_id: str, child: subprocess.Popen,
                     deadline: float) -> tuple[Path | None, bool]:
    """Wait until the background launch's preflight passed (its record says it began serving, and
    a record that did stays in `runs/`) or the launch ended (a refused one's record moves to
    `refused/`). Returns the record's path (None: not known by the deadline) and whether it passed."""
    from harness.records.record import RunRecord

    record = paths.run(run_id).record
    while True:
        ended = child.poll() is not None
        try:
            rec = RunRecord.load(record)
        except (OSError, ValueError):
            rec = None
        if rec is not None and rec.times.serve_start is not None:
            return record, True
        if ended:
            for found in (record, paths.refused / run_id / "run.json"):
                if found.is_file():
                    return found, child.returncode == 0
            return None, False
        if time.monotonic() >= deadline:
            return None, False
        time.sleep(0.1)


def _print_ended(root: Path, facts: dict, record: Path | None, code: int, as_json: bool) -> None:
    """A background launch that ended before serving: its refusal (the record's reason, else the
    log's tail) on stderr, and on stdout its run id, status and record."""
    from harness.records.record import RunRecord

    reason, status = None, None
    if record is not None:
        try:
            rec = RunRecord.load(record)
            reason, status = rec.reason, rec.status.value
        except (OSError, ValueError):
            pass
    if reason is None:
        reason = (root / facts["log"]).read_text(errors="replace")[-2000:]
    facts = {**facts, "status": status, "reason": reason, "exit_code": code}
    if as_json:
        out.print_json(json.dumps(facts))
    else:
        out.print(f"run {facts['run_id']}: {status or 'ended'} before anything was served\n"
                  f"  record: {facts['record'] or '(none)'}\n  log:    {facts['log']}", highlight=False, soft_wrap=True)
    err.print(f"[bold red]{status or 'ended'}:[/bold red] {escape(one_line(reason))}", highlight=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="launch")
