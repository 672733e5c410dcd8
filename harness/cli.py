"""The `llms-benchmark` command line: thin — parse, call one function, print with rich.

Exit codes: 0 ok, 1 a void run, 2 a preflight or input error (nothing served),
3 a harness fault (the unit still destroyed).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.console import Console
from rich.table import Table

from harness.errors import StackError, UserError
from harness.mission import DEFAULT_MISSION

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Serve a preset, run a coding agent on a mission against it, measure what holds up.")
launch_app = typer.Typer(no_args_is_help=True, help="Run the benchmark end to end.")
app.add_typer(launch_app, name="launch")
mission_app = typer.Typer(no_args_is_help=True, help="Missions: check that one works end to end.")
app.add_typer(mission_app, name="mission")
score_app = typer.Typer(no_args_is_help=True, help="Recompute a results row's Scoring from its cells.")
app.add_typer(score_app, name="score")
from harness.fitness.cli import fitness_app  # noqa: E402 - the `fitness` verbs (harness/fitness/cli.py)

app.add_typer(fitness_app, name="fitness")

out = Console()
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def project_root() -> Path:
    """LLMS_BENCHMARK_ROOT, else the nearest folder upwards holding `.vot/`, else the cwd."""
    if os.environ.get("LLMS_BENCHMARK_ROOT"):
        return Path(os.environ["LLMS_BENCHMARK_ROOT"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / ".vot").is_dir():
            return folder
    return here


def say(message: str) -> None:
    err.print(f"[dim]llms-benchmark[/dim] {escape(message)}", highlight=False)


def user_errors(fn):
    """A user mistake is one clear message and exit 2 — never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            err.print(f"[bold red]error:[/bold red] {escape(exc.render())}", highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except StackError as exc:  # the unit failed to start or answer (already destroyed)
            err.print(f"[bold red]unit failure:[/bold red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(3) from None

    return wrapper


def _emit(data: dict, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        out.print_json(json.dumps(data, default=str))
    elif table is not None:
        out.print(table)


@app.command()
@user_errors
def validate(paths: Annotated[list[Path], typer.Argument(help="Presets, environments or mission folders.")]) -> None:
    """Validate presets (.vot/presets/), environments (.vot/environments/) and missions (missions/<name>/)."""
    from harness.vot.validate import validate_path

    root = project_root()
    failed = 0
    for path in paths:
        try:
            out.print(validate_path(root, path), highlight=False)
        except UserError as exc:
            failed += 1
            err.print(f"[bold red]error:[/bold red] {escape(exc.render())}", highlight=False)
    if failed:
        raise typer.Exit(2)


@app.command()
@user_errors
def preflight(environment: str, preset: str,
              mission: Annotated[str, typer.Option(help="Mission whose minimum context is checked.")] = DEFAULT_MISSION,
              as_json: JsonOpt = False) -> None:
    """Check everything that must hold before anything bills."""
    from harness.preflight import run_preflight

    pf = run_preflight(project_root(), environment, preset, mission)
    data = {"environment": pf.env.name, "stack": pf.env.stack, "preset": pf.preset.name, "model": pf.preset.model,
            "served_name": pf.preset.served_name, "max_model_len": pf.preset.max_model_len, "gpu": pf.gpu.label,
            "mission": mission, "opencode": pf.opencode_version, "ok": True}
    table = Table("check", "value", title="preflight ok")
    for key, value in data.items():
        table.add_row(key, str(value))
    _emit(data, as_json, table)


@app.command()
@user_errors
def serve(environment: str, preset: str, as_json: JsonOpt = False) -> None:
    """Serve one unit by hand (it bills until `destroy`)."""
    from harness.launch import destroy_leftovers, plan_unit, refuse_if_served, start_unit
    from harness.preflight import run_preflight
    from harness.probe import unit_api_key
    from harness.stacks.ledger import Ledger
    from harness.unitlog import UnitLogCollector, wait_ready

    root = project_root()
    destroy_leftovers(root, say)
    pf = run_preflight(root, environment, preset, None, need_opencode=False)
    refuse_if_served(root, pf.env.name, f"vot-{pf.preset.name}")
    ledger = Ledger(root)
    unit = plan_unit(pf, ledger, owner=False)
    collector = UnitLogCollector(pf.stack, unit, Path(os.devnull))
    try:
        unit = start_unit(pf, unit, ledger)
        collector.start()
        say(f"serving {unit.name} at {unit.base_url}; waiting until it answers")
        limit, started = pf.stack.ready_timeout_s, time.monotonic()
        with err.status(f"waiting for {unit.name} (up to {limit / 60:.0f} min)") as status:
            wait_ready(unit, limit, collector, api_key=unit_api_key(pf.stack, unit),
                       on_wait=lambda: status.update(f"waiting for {unit.name} to list {unit.served_name}: "
                                                     f"{time.monotonic() - started:.0f}s of {limit:.0f}s"))
    except BaseException:
        collector.stop()
        pf.stack.destroy(unit)
        ledger.remove(unit)
        say(f"{unit.name} destroyed; the last lines of its log ({unit.log_path}):")
        tail = Path(unit.log_path).read_text(errors="replace").splitlines()[-20:] if unit.log_path else []
        err.print("\n".join(tail), highlight=False, markup=False)
        raise
    collector.stop()
    data = {"unit": unit.name, "base_url": unit.base_url, "served_name": unit.served_name, "log": unit.log_path}
    table = Table("unit", "base URL", "served name", "log", title="ready — billing until destroyed")
    table.add_row(unit.name, unit.base_url, unit.served_name, unit.log_path or "")
    _emit(data, as_json, table)
    say(f"destroy with: llms-benchmark destroy {environment} {preset}")


@app.command()
@user_errors
def destroy(environment: str, preset: str) -> None:
    """Destroy unit vot-<preset> on an environment (a missing unit is reported, not an error)."""
    from harness.launch import destroy_unit
    from harness.stacks.ledger import Ledger
    from harness.stacks.registry import get_stack
    from harness.vot.environment import load_environment

    root = project_root()
    env = load_environment(root, environment)
    ledger = Ledger(root)
    unit = ledger.get(env.name, f"vot-{preset}")
    if unit is None:
        out.print(f"unit vot-{preset} does not exist on {env.name} (nothing in the ledger)")
        return
    existed = destroy_unit(get_stack(unit.stack, root), unit, ledger)
    out.print(f"destroyed {unit.name} on {env.name}" + ("" if existed else " (it had already exited)"))


@app.command()
@user_errors
def units(as_json: JsonOpt = False) -> None:
    """List the units in the ledger (served and not yet destroyed)."""
    from harness.stacks.ledger import Ledger

    listed = Ledger(project_root()).all()
    table = Table("environment", "unit", "stack", "base URL", "pid", "owner", title="units in the ledger")
    for u in listed:
        table.add_row(u.environment, u.name, u.stack, u.base_url, str(u.pid or ""),
                      str(u.extra.get("owner_pid") or "by hand"))
    _emit({"units": [u.__dict__ for u in listed]}, as_json, table)
    if not as_json and not listed:
        out.print("no units in the ledger")


@app.command()
@user_errors
def probe(base_url: str, model: Annotated[str, typer.Option("--model", help="Served model name.")],
          max_model_len: Annotated[int, typer.Option(help="The server's context length.")] = 0,
          long_tokens: Annotated[int, typer.Option(help="Target size of the long-context prompt.")] = 82_000,
          api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
          as_json: JsonOpt = False) -> None:
    """Measure decode (short and long context) and prefill speed of a served model."""
    import httpx

    from harness.probe import api_key_from_env, run_probe

    try:
        result = run_probe(base_url, model, max_model_len=max_model_len or None,
                           api_key=api_key_from_env(api_key_env or None), long_target=long_tokens)
    except httpx.HTTPError as exc:
        raise UserError(f"the server at {base_url} did not answer the probe: {exc}",
                        fix="check the base URL and the --model name (GET /v1/models lists it)") from None
    table = Table("figure", "value", title=f"probe of {model}")
    for key, value in result.model_dump().items():
        table.add_row(key, str(value))
    _emit(result.model_dump(), as_json, table)


@app.command()
@user_errors
def collect(data_dir: Path,
            session: Annotated[str, typer.Option("--session", help="Root session id.")] = "",
            title: Annotated[str, typer.Option("--title", help="Root session title.")] = "",
            as_json: JsonOpt = False) -> None:
    """Read tokens, turns, median turn and compactions from an opencode data directory."""
    from harness.opencode.store import collect as collect_store

    figures = collect_store(data_dir, session_id=session or None, title=title or None)
    data = json.loads(figures.model_dump_json())
    table = Table("figure", "value", title=f"session {figures.root_session}")
    for key, value in data.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    _emit(data, as_json, table)


@launch_app.command("local")
@user_errors
def launch_local_cmd(
    environment: Annotated[str, typer.Argument(help="A .vot/environments/<name>.yaml name.")],
    preset: Annotated[str, typer.Argument(help="A .vot/presets/<name>.yaml name.")],
    effort: Annotated[str, typer.Argument(help="Reasoning effort (low, medium, high).")] = "medium",
    mission: Annotated[str, typer.Option(help="Mission under missions/.")] = DEFAULT_MISSION,
    probe_long_tokens: Annotated[int, typer.Option(help="Long-context probe size (0: 82k where the context allows).")] = 0,
    no_sandbox: Annotated[bool, typer.Option(
        "--no-sandbox", help="Run the agent unconfined (the record and the results row say so).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Serve PRESET on ENVIRONMENT once, probe it, run the mission with opencode, destroy, record."""
    from harness.launch import LaunchOptions, launch_local
    from harness.summary import run_summary_table

    record = launch_local(LaunchOptions(project_root(), environment, preset, effort, mission,
                                        probe_long_tokens or None, sandbox=not no_sandbox), say)
    if as_json:
        out.print_json(record.model_dump_json())
    else:
        out.print(run_summary_table(record))
    if record.reason:
        err.print(f"[bold red]{record.status.value}:[/bold red] {escape(record.reason or '')}", highlight=False)
    raise typer.Exit(record.status.exit_code)


@app.command("rule")
@user_errors
def rule_cmd(run_id: str,
             accept: Annotated[bool, typer.Option("--accept", help="Accept every proposal (scripts).")] = False,
             grader: Annotated[str, typer.Option(
                 "--grader", help="PROVIDER/MODEL of a grader model that proposes each verdict.")] = "",
             grader_url: Annotated[str, typer.Option(
                 help="The grader's OpenAI-compatible base URL (else the provider's, from opencode).")] = "",
             grader_key_env: Annotated[str, typer.Option(
                 help="Name of the env var holding the grader's key (never the key).")] = "",
             grader_config: Annotated[Path | None, typer.Option(
                 help="An opencode config defining the grader's provider.")] = None,
             as_json: JsonOpt = False) -> None:
    """Draft RUN_ID's rulings (key-matcher, then an optional grader model); accept or override each finding."""
    import sys

    from rich.prompt import Prompt

    from harness.rule import VERDICT_CHOICES, GraderNotes, edited, rule

    endpoint = None
    if grader:
        from harness.grader.provider import resolve

        endpoint = resolve(grader, url=grader_url or None, key_env=grader_key_env or None, config=grader_config)
    seen: list[str] = []  # the numbers asked so far: a restatement names one of them

    def ask(finding):
        seen.append(finding.number)
        out.print(f"\n[bold]finding {finding.number}[/bold] ({finding.kind or 'no kind'}): {finding.text}")
        out.print(f"  proposed: [bold]{finding.verdict}[/bold] by {finding.ruled_by} — {finding.reason}",
                  highlight=False)
        if finding.number in disagreed:
            out.print(f"  the key-matcher proposed: {disagreed[finding.number]}", highlight=False)
        out.print(f"  defects: {', '.join(finding.defects) or 'none'}; counts {finding.counts}"
                  + (f"; restates {finding.restates}" if finding.restates else ""), highlight=False)
        choice = Prompt.ask("  [a]ccept, [h]eld up, [d]id not hold up, [e]dit verdict and counting",
                            choices=list(VERDICT_CHOICES), default="a")
        if VERDICT_CHOICES[choice] is None:
            return None
        if VERDICT_CHOICES[choice] != "edit":
            return VERDICT_CHOICES[choice], Prompt.ask("  reason, in one sentence")
        while True:  # until the edit is one a rulings file accepts
            changes = ask_edit(finding)
            try:
                edited(finding, changes, seen[:-1])
                return changes
            except ValueError as exc:
                err.print(f"  [red]not accepted:[/red] {escape(str(exc).splitlines()[-1])}", highlight=False)

    def ask_edit(finding) -> dict:
        verdict = Prompt.ask("  verdict: [h]eld up, [d]id not hold up", choices=["h", "d"],
                             default="h" if finding.verdict == "held up" else "d")
        defects = Prompt.ask("  defects it names (comma-separated key ids, '-' for none)",
                             default=",".join(finding.defects) or "-")
        restates = Prompt.ask("  restates finding (number, '-' for none)", default=finding.restates or "-")
        counts = Prompt.ask("  counts", default="0" if restates != "-" else str(finding.counts))
        return {"verdict": VERDICT_CHOICES[verdict], "reason": Prompt.ask("  reason, in one sentence"),
                "defects": [d.strip() for d in defects.split(",") if d.strip() and d.strip() != "-"],
                "restates": None if restates.strip() in ("", "-") else restates.strip(),
                "counts": int(counts) if counts.strip().isdigit() else counts}

    interactive = not accept and sys.stdin.isatty()
    say = (lambda text: None) if as_json else (lambda text: err.print(text, style="dim", highlight=False))
    # The grader runs before the prompts, filling `notes`; each prompt shows its disagreement.
    notes = GraderNotes()
    disagreed = notes.disagreed
    rulings, path = rule(project_root(), run_id, ask=ask if interactive else None, accept=accept,
                         grader=endpoint, say=say, notes=notes)
    summary = {"rulings": str(path), "final": rulings.final, "confirmed": rulings.confirmed,
               "reported": rulings.reported, "accuracy": rulings.accuracy, "by_kind": rulings.by_kind,
               "recall": f"{len(rulings.recall.found)}/{rulings.recall.planted}",
               "grader": endpoint.label if endpoint else None,
               "grader_disagreed": notes.disagreed, "grader_failed": notes.failed}
    if as_json:
        out.print_json(json.dumps(summary))
    else:
        table = Table("#", "kind", "verdict", "by", "reason", title=f"rulings for {run_id}")
        for f in rulings.findings:
            table.add_row(f.number, f.kind or "—", f.verdict, f.ruled_by, f.reason)
        out.print(table)
        for number, why in notes.failed.items():
            err.print(f"[yellow]grader gave no proposal for finding {number}:[/yellow] {escape(why)} "
                      "(the key-matcher's stands)", highlight=False)
        out.print(f"{summary['confirmed']} / {summary['reported']} held up, accuracy {summary['accuracy']}%, "
                  f"planted defects found {summary['recall']}; written to {path}"
                  + ("" if rulings.final else " — a DRAFT: rerun at a terminal, or with --accept"))


@mission_app.command("check")
@user_errors
def mission_check(name: str,
                  duration: Annotated[float, typer.Option(help="Scenario length in seconds.")] = 120,
                  as_json: JsonOpt = False) -> None:
    """Start what the mission runs, drive its scenario, run its key's self-test; exit 0 only if all is there."""
    import tempfile

    from harness.mission import load_mission, prepare_workspace
    from harness.mission_services import check_mission

    mission = load_mission(project_root(), name)
    with tempfile.TemporaryDirectory(prefix=f"llms-benchmark-check-{name}-") as tmp:
        workspace = prepare_workspace(mission, Path(tmp) / "workspace")
        result = check_mission(mission, workspace, Path(tmp), duration)
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        table = Table("signal", *next(iter(result["signals"].values()), {}).keys(), title="rows per service")
        for signal_name, per in result["signals"].items():
            table.add_row(signal_name, *(str(n) for n in per.values()))
        out.print(table)
        defects = Table("defect", "kind", "found", "evidence", title="key self-test")
        for d in result["defects"]:
            defects.add_row(d["id"], d["kind"], "yes" if d["found"] else "[red]NO[/red]",
                            "; ".join(f"{c['expect']} (got {c['got']})" for c in d["checks"]))
        out.print(defects)
        found = sum(d["found"] for d in result["defects"])
        out.print(f"{found}/{len(result['defects'])} defects found; workspace "
                  + ("clean" if not result["workspace_hits"] else f"names the key: {result['workspace_hits'][:5]}"))
    raise typer.Exit(0 if result["ok"] else 1)


def _score_output(result, as_json: bool) -> None:
    if as_json:
        _emit(result.to_dict(), True)
        return
    table = Table("axis", "points", "weight", title=f"{result.kind} scoring {result.score:.1f}")
    for axis, points in result.axes.items():
        table.add_row(axis, f"{points:.1f}", f"{result.weights[axis]:.3f}")
    _emit({}, False, table)


UsdPerConfirmedOpt = Annotated[str | None, typer.Option(
    "--usd-per-confirmed", help="$/confirmed cell ($0.016 or 0.016); may be omitted with 0 confirmed.")]
SecondsPerConfirmedOpt = Annotated[str | None, typer.Option(
    "--seconds-per-confirmed", help="seconds/confirmed cell (56s or 56); may be omitted with 0 confirmed.")]
TotalOpt = Annotated[str, typer.Option("--total", help="Total cell: NmSSs (150m02s) or seconds (9002).")]
AccuracyOpt = Annotated[str, typer.Option("--accuracy", help="Accuracy cell (88% or 88).")]
ConfirmedOpt = Annotated[str, typer.Option("--confirmed", help="Confirmed findings (7, or the cell 7 / 8).")]


@score_app.command("local")
@user_errors
def score_local_cmd(total: TotalOpt, accuracy: AccuracyOpt, confirmed: ConfirmedOpt,
                    seconds_per_confirmed: SecondsPerConfirmedOpt = None, as_json: JsonOpt = False) -> None:
    """Score a local-serving row: seconds/confirmed 3/7, Total 2/7, Accuracy 1/7, Confirmed 1/7."""
    from harness.scoring import score_local

    _score_output(score_local(seconds_per_confirmed, total, accuracy, confirmed), as_json)


@score_app.command("remote")
@user_errors
def score_remote_cmd(total: TotalOpt, accuracy: AccuracyOpt, confirmed: ConfirmedOpt,
                     usd_per_confirmed: UsdPerConfirmedOpt = None,
                     seconds_per_confirmed: SecondsPerConfirmedOpt = None, as_json: JsonOpt = False) -> None:
    """Score a remote-serving row: $/confirmed 0.30, seconds/confirmed 0.30, Total 0.20,
    Accuracy 0.10, Confirmed 0.10."""
    from harness.scoring import score_remote

    _score_output(score_remote(usd_per_confirmed, seconds_per_confirmed, total, accuracy, confirmed), as_json)


PageOpt = Annotated[Path | None, typer.Option("--page", help="The results page (default .llms-benchmark/README.md).")]


@score_app.command("check")
@user_errors
def score_check_cmd(page: PageOpt = None, as_json: JsonOpt = False) -> None:
    """Recompute every Scoring cell of the results page from its own row; exit 1 if one disagrees."""

    from harness.results.check import check_rows
    from harness.results.render import PAGE, read_page

    path = page or project_root() / PAGE
    checked, problems = check_rows(read_page(path, missing_fix="render it with: llms-benchmark render"))
    if as_json:
        _emit({"page": str(path), "rows": checked, "ok": not problems, "problems": problems}, True)
    else:
        for problem in problems:
            err.print(f"[bold red]disagrees:[/bold red] {escape(problem)}", highlight=False)
        out.print(f"{path}: {checked} rows, " + (f"{len(problems)} disagree" if problems else "every Scoring agrees"),
                  highlight=False)
    raise typer.Exit(1 if problems else 0)


@app.command()
@user_errors
def render(page: PageOpt = None,
           include_scripted: Annotated[bool, typer.Option(
               "--include-scripted", help="Also row scripted replay runs (demos and tests; needs --page).")] = False,
           as_json: JsonOpt = False) -> None:
    """Render the results tables (run records + final rulings, remote rows) into the page between its markers."""
    from harness.results.render import PAGE, render_page

    root = project_root()
    path = page or root / PAGE
    changed = render_page(root, path, include_scripted)
    if as_json:
        _emit({"page": str(path), "changed": changed}, True)
    else:
        out.print(f"{path}: " + ("rewritten" if changed else "unchanged, already up to date"), highlight=False)


@app.command()
@user_errors
def classroom(
    base_url: Annotated[str, typer.Argument(help="The OpenAI-compatible server, e.g. http://127.0.0.1:8000.")],
    model: Annotated[str, typer.Option("--model", help="Served model name (GET /v1/models must list it).")],
    users: Annotated[int, typer.Option(help="Simulated students.")] = 40,
    scenario: Annotated[str, typer.Option(help="Lab project: python, java, or mixed (alternating).")] = "mixed",
    duration: Annotated[float, typer.Option(help="Real seconds during which students start new requests.")] = 900,
    grace: Annotated[float, typer.Option(help="Real seconds after --duration for requests under way.")] = 300,
    ramp_up: Annotated[float, typer.Option(help="Students start within this many simulated seconds.")] = 120,
    think_min: Annotated[float, typer.Option(help="Shortest pause between requests (simulated s).")] = 20,
    think_max: Annotated[float, typer.Option(help="Longest pause between requests (simulated s).")] = 90,
    tool_min: Annotated[float, typer.Option(help="Shortest build/test run (simulated s).")] = 3,
    tool_max: Annotated[float, typer.Option(help="Longest build/test run (simulated s).")] = 12,
    test_fail_rate: Annotated[float, typer.Option(help="Chance that a session's first test run fails.")] = 0.3,
    max_turns: Annotated[int, typer.Option(help="Requests per student: the exercise + follow-ups.")] = 4,
    max_steps: Annotated[int, typer.Option(help="Model calls per request, tool steps included.")] = 40,
    max_output: Annotated[int, typer.Option(help="max_tokens per call (opencode limit.output).")] = 8192,
    context_limit: Annotated[int, typer.Option(help="Client context limit (opencode limit.context).")] = 65536,
    max_retries: Annotated[int, typer.Option(help="Retries per call after HTTP 429 or 503.")] = 5,
    keys_file: Annotated[Path | None, typer.Option(help="API keys, one a line or user_id,api_key.")] = None,
    api_key_env: Annotated[str, typer.Option(help="Env var holding one key for all (without --keys-file).")] = "",
    prompt_file: Annotated[Path | None, typer.Option(help="Captured opencode {system, tools} JSON.")] = None,
    title: Annotated[bool, typer.Option("--title/--no-title", help="Send opencode's title request.")] = True,
    metrics: Annotated[bool, typer.Option("--metrics/--no-metrics", help="Sample the server's /metrics.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 20260929,
    time_scale: Annotated[float, typer.Option(help="Multiplier for simulated waits (1.0 = real seconds).")] = 1.0,
    timeout: Annotated[float, typer.Option(help="Per-read idle timeout of a request (s).")] = 600,
    out_dir: Annotated[Path | None, typer.Option(help="Parent of classroom-<UTC>/ (default ./bench-results).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a class of students, each with a coding agent on a small lab project, against a real endpoint."""
    from harness.load.classroom import ClassroomConfig, run_classroom
    from harness.load.classroom_report import summary_table

    cfg = ClassroomConfig(
        base_url=base_url, model=model, users=users, scenario=scenario, duration_s=duration, grace_s=grace,
        ramp_up_s=ramp_up, think_s=(think_min, think_max), tool_s=(tool_min, tool_max), test_fail_rate=test_fail_rate,
        max_turns=max_turns, max_steps=max_steps, max_output=max_output, context_limit=context_limit,
        max_retries=max_retries, keys_file=keys_file, api_key_env=api_key_env or None, prompt_file=prompt_file,
        title=title, metrics=metrics, seed=seed, time_scale=time_scale, read_timeout_s=timeout,
        out_dir=out_dir or project_root() / "bench-results")
    result = run_classroom(cfg, say)
    if as_json:
        _emit({**result.summary, "folder": str(result.folder)}, True)
    else:
        out.print(summary_table(result.summary))
        out.print(f"results: {result.folder}", highlight=False)
    raise typer.Exit(0 if result.summary["client"]["requests_ok"] else 1)


@app.command()
@user_errors
def load(
    target: Annotated[list[str] | None, typer.Argument(
        help="A base URL (http://127.0.0.1:8000), or ENVIRONMENT PRESET to serve for the run and destroy after.")] = None,
    base_url: Annotated[str, typer.Option("--base-url", help="The server's base URL (instead of TARGET).")] = "",
    model: Annotated[str, typer.Option("--model", help="Served model name (default: the first /v1/models lists).")] = "",
    concurrency: Annotated[str, typer.Option(help="Requests in flight per level, comma-separated.")] = "1,8,16,24,40",
    shapes: Annotated[str, typer.Option(help="Prompt shapes: short, long, or NAME=TOKENS items.")] = "short,long",
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

    from harness.load.load import resolve_target, run_load
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

    from harness.launch import Interrupted

    with RichReporter(err) as reporter:
        try:
            outcome = run_load(project_root(), where, opts, confirm=confirm, reporter=reporter, say=say)
        except (KeyboardInterrupt, Interrupted):
            err.print("[bold red]interrupted[/bold red]; finished levels are kept", highlight=False)
            raise typer.Exit(130) from None
    if outcome.path is None:
        err.print("cancelled: nothing was sent", highlight=False)
        raise typer.Exit(1)
    data = {"results": str(outcome.path), "levels": outcome.rows}
    table = Table("shape", "c", "ok", "in tok", "out tok/s", "TTFT p50", "TTFT p99", "E2E p50", "ITL p50 ms",
                  "preempt", "KV peak %", title=f"load: {outcome.path}")
    formats = {"input_tokens_mean": ",.0f", "output_throughput_tok_s": ",.1f", "ttft_p50_s": ".3f",
               "ttft_p99_s": ".3f", "e2e_p50_s": ".3f", "itl_p50_ms": ".2f", "preemptions": "g",
               "kv_cache_peak_percent": ".1f"}
    for r in outcome.rows:
        table.add_row(r["shape"], str(r["concurrency"]), f"{r['succeeded']}/{r['requests']}",
                      *("-" if r[k] is None else format(r[k], f) for k, f in formats.items()))
    _emit(data, as_json, table)
    raise typer.Exit(outcome.exit_code)


@app.command("metrics")
@user_errors
def metrics_cmd(
    url: Annotated[str | None, typer.Argument(help="The server's base URL (or its /metrics URL).")] = None,
    base_url: Annotated[str, typer.Option("--base-url", help="The server's base URL (instead of URL).")] = "",
    watch: Annotated[float, typer.Option(help="Read every N seconds, one line each (0: once).")] = 0,
    count: Annotated[int, typer.Option(help="With --watch: stop after this many lines (0: until Ctrl-C).")] = 0,
    api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Read the server's /metrics: running, waiting, KV usage, preemptions, prefix cache, tokens (vLLM, llama.cpp)."""
    from harness.load.metrics import line_text, read_once, timeline
    from harness.probe import api_key_from_env

    target = base_url or url
    if not target or (url and base_url):
        raise UserError("give the server's URL once: as URL or as --base-url", field="URL",
                        fix="llms-benchmark metrics http://127.0.0.1:8000")
    if watch < 0 or count < 0:
        raise UserError("--watch and --count cannot be negative", field="--watch")
    api_key = api_key_from_env(api_key_env or None)
    if not watch:
        doc = read_once(target, api_key=api_key)
        table = Table("figure", "value", title=f"{doc['url']} ({doc['server']})")
        for key, value in doc["figures"].items():
            table.add_row(key, "-" if value is None else f"{value:g}")
        _emit(doc, as_json, table)
        return
    try:
        for line in timeline(target, watch, count or None, api_key=api_key):
            if as_json:
                print(json.dumps(line), flush=True)
            else:
                out.print(line_text(line), highlight=False, markup=False)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
