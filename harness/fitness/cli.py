"""`llms-benchmark fitness ...`: thin commands over harness.fitness (run, data, metrics, serve).

Exit codes of `run`: 0 all PASS, 1 WARN only, 2 any FAIL, 3 pipeline error — a bad
config, and a usage error of any `fitness` verb (a mistyped option, a bad value), is one clear
error and exit 3, never the 2 that means FAIL (CI: fail the job when the code is >= 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup
from rich.markup import escape
from rich.table import Table

from harness.cli.common import comma_list
from harness.run.clean_exit import clean_exit
from harness.errors import PreflightError, UserError

# typer's own click (vendored) raises it: found through its public BadParameter, a subclass.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _UsageIsPipelineError:
    """A mistyped option, a missing or bad value, an unknown verb: the seed's contract reads exit 2
    as FAIL, so a usage error of `fitness` exits 3 (a pipeline error), with click's own message."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as exc:
            exc.exit_code = PIPELINE_ERROR
            raise

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            exc.exit_code = PIPELINE_ERROR
            raise


class FitnessGroup(_UsageIsPipelineError, TyperGroup):
    pass


class FitnessCommand(_UsageIsPipelineError, TyperCommand):
    pass


fitness_app = typer.Typer(no_args_is_help=True, cls=FitnessGroup,
                          help="Is a served preset fit to drive agents? Verdicts as exit codes.")
out = Console()
err = Console(stderr=True)
PIPELINE_ERROR = 3


def say(message: str) -> None:
    err.print(f"[dim]fitness[/dim] {escape(message)}", highlight=False)


# Bad config, a missing file, a unit that did not serve: one clear message, exit 3.
pipeline_errors = clean_exit(err, user_exit=PIPELINE_ERROR, unit_exit=PIPELINE_ERROR)


def _ints(items: list[str] | None, option: str) -> list[int] | None:
    if items is None:
        return None
    try:
        values = [int(p) for p in items]
    except ValueError:
        values = []
    if not values:
        raise UserError(f"'{','.join(items)}' is not a list of numbers", field=option,
                        fix=f"e.g. {option} 512,8192,32768")
    return values


@fitness_app.command("run", cls=FitnessCommand)
@pipeline_errors
def run_cmd(
    target: Annotated[list[str] | None, typer.Argument(
        help="ENVIRONMENT PRESET (served for the run, destroyed after) or a base URL.")] = None,
    base_url: Annotated[str, typer.Option("--base-url", help="A running server's base URL (instead of TARGET).")] = "",
    model: Annotated[str, typer.Option("--model", help="Served model name (default: the unit's, or the first listed).")] = "",
    config: Annotated[Path | None, typer.Option("--config", help="A fitness YAML (see fitness.example.yaml).")] = None,
    phases: Annotated[list[str] | None, typer.Option(help="Phases to run, comma-separated (default: all).",
                                                     callback=comma_list, metavar="TEXT")] = None,
    skip: Annotated[list[str] | None, typer.Option(help="Phases to leave out, comma-separated.",
                                                   callback=comma_list, metavar="TEXT")] = None,
    thresholds: Annotated[Path | None, typer.Option(help="Thresholds YAML (default: the shipped one).")] = None,
    repeats: Annotated[int | None, typer.Option(help="2: repeat throughput and capacity in reverse order.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of every prompt.")] = None,
    contexts: Annotated[list[str] | None, typer.Option(help="Throughput context sizes, e.g. 512,8192,32768.",
                                                       callback=comma_list, metavar="TEXT")] = None,
    levels: Annotated[list[str] | None, typer.Option(help="Capacity levels (requests in flight), e.g. 1,2,4,8.",
                                                     callback=comma_list, metavar="TEXT")] = None,
    limit: Annotated[int | None, typer.Option(help="Capability items per suite (0: all).")] = None,
    report_dir: Annotated[Path | None, typer.Option(help="The report folder (default bench-results/fitness/<run>).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="An earlier results.json: capability deltas vs 2·SE.")] = None,
    webhook_env: Annotated[str | None, typer.Option(help="NAME of the env var holding the webhook URL.")] = None,
    api_key_env: Annotated[str, typer.Option(help="NAME of the env var holding a base URL's API key.")] = "",
    run_id: Annotated[str | None, typer.Option(hidden=True)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate config, thresholds and data offline; serve nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the compact summary as JSON.")] = False,
) -> None:
    """Run the fitness phases against ENV PRESET (served once) or a base URL; exit 0/1/2/3."""
    from harness.cli.common import project_root
    from harness.fitness.config import load_config, parse_phase_list, refuse_nothing_to_measure
    from harness.fitness.runner import dry_run as offline, resolve_target, run_fitness

    overrides = {
        "phases": parse_phase_list(phases, "--phases") if phases is not None else None,
        "skip": parse_phase_list(skip, "--skip") if skip is not None else None,
        "thresholds": str(thresholds) if thresholds else None, "repeats": repeats, "seed": seed,
        "throughput.contexts": _ints(contexts, "--contexts"), "capacity.levels": _ints(levels, "--levels"),
        "capability.limit": limit, "webhook.url_env": webhook_env,
    }
    if dry_run:
        cfg = load_config(config, overrides)
        refuse_nothing_to_measure(cfg)
        result = offline(cfg)
        if as_json:
            out.print_json(json.dumps(result))
        else:
            for name, note in result["checks"].items():
                out.print(f"{name}: {escape(note)}", highlight=False)
            out.print(f"dry run ok: {len(result['phases'])} phases, {len(result['bars'])} bars "
                      f"({result['thresholds']})", highlight=False)
        return
    try:
        cfg = load_config(config, overrides)
        where = resolve_target(target or [], base_url or None, model or None, api_key_env or None)
    except UserError as exc:  # even a run that cannot start leaves its record (and tells the webhook)
        from harness.fitness.runner import record_failure

        failed = record_failure(project_root(), exc, target_label=" ".join(target or []) or base_url or "(none)",
                                report_dir=report_dir, run_id=run_id,
                                webhook_env=webhook_env or _raw_webhook_env(config), say=say)
        say(f"report: {failed.report_dir / 'report.md'}")
        raise
    refuse_nothing_to_measure(cfg)  # a usage mistake, refused before anything is asked or written
    outcome = run_fitness(project_root(), where, cfg, say=say, report_dir=report_dir, baseline=baseline,
                          run_id=run_id)
    from harness.fitness.report import summary

    if as_json:
        out.print_json(json.dumps(summary(outcome.results, outcome.report_dir), default=str))
    else:
        table = Table("metric", "value", "bars", "verdict", title=f"fitness {outcome.results['verdict']}")
        for v in outcome.results["verdicts"]:
            table.add_row(v["metric"], "—" if v["value"] is None else f"{v['value']:g}", v["bars"],
                          v["verdict"] + ("" if v["gates"] or v["verdict"] == "OFF" else " (advisory)"))
        out.print(table)
        for p in outcome.results["phases"]:
            out.print(f"{p['name']} (pass {p['repeat']}): {p['status']} {p['wall_s']:.1f}s"
                      + (f" — {p['reason']}" if p["reason"] else ""), highlight=False)
        for w in outcome.results.get("warnings", []):
            err.print(f"[bold yellow]WARNING:[/bold yellow] {escape(w)}", highlight=False)
        for e in outcome.results["errors"]:
            err.print(f"[bold red]error:[/bold red] {escape(e)}", highlight=False)
        out.print(f"report: {outcome.report_dir / 'report.md'}", highlight=False)
    raise typer.Exit(outcome.exit_code)


def _raw_webhook_env(config: Path | None) -> str | None:
    """webhook.url_env from a config file that did not validate, when it can still be read."""
    if config is None:
        return None
    try:
        import yaml

        raw = yaml.safe_load(Path(config).read_text())
        value = (raw.get("webhook") or {}).get("url_env")
        return value if isinstance(value, str) else None
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None


@fitness_app.command("data", cls=FitnessCommand)
@pipeline_errors
def data_cmd(
    data_dir: Annotated[Path | None, typer.Option(help="Where the frozen files go.")] = None,
    checkers_venv: Annotated[Path | None, typer.Option(help="Where the checkers' lean venv goes (BFCL, IFBench).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest and the checkers' versions as JSON.")
                       ] = False,
) -> None:
    """Once, online (PyPI only): the capability suites' frozen files from their pinned wheels (sha256
    checked), and the lean venv of the upstream checkers (bfcl-eval, if-verifiable; --no-deps)."""
    from harness.fitness import checkers, data

    target = data_dir or data.default_dir()
    tell = say if as_json else (lambda m: out.print(m, highlight=False))  # stdout is the JSON's alone
    manifest = data.prepare(target, say=tell)
    if not as_json:
        out.print(f"manifest: {target / 'manifest.json'}", highlight=False)
    venv = checkers_venv or checkers.default_dir()
    versions = checkers.prepare(venv, say=tell)
    if as_json:
        out.print_json(json.dumps({"data_dir": str(target), "manifest": str(target / "manifest.json"),
                                   "files": manifest, "checkers_venv": str(venv), "checkers": versions}, default=str))


@fitness_app.command("smoke", cls=FitnessCommand, add_help_option=False,
                     context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def smoke_cmd(ctx: typer.Context) -> None:
    """Seed 003's bare-stdlib smoke (the same file python3 runs alone: harness/fitness/smoke.py): telemetry,
    warmup, tooluse, throughput, judge generation[, kl]; exit 0 PASS, 2 FAIL, 3 error. `--help` for its options."""
    from harness.fitness import smoke

    raise typer.Exit(smoke.main(list(ctx.args)))


@fitness_app.command("tools", cls=FitnessCommand)
@pipeline_errors
def tools_cmd(
    tools_venv: Annotated[Path | None, typer.Option(help="Where the tools' venv goes (default "
                                                         "~/.cache/llms-benchmark/fitness-tools).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the venv and its tools' versions as JSON.")] = False,
) -> None:
    """Once, online (PyPI only): seed 003's lm-eval (`lm-eval[api]`, pinned) in a venv of its own, checked
    by the torch guardrail; `capability.lmeval: true` then runs it over the frozen files."""
    from harness.fitness import lmeval

    venv = tools_venv or lmeval.default_dir()
    versions = lmeval.prepare(venv, say=say if as_json else (lambda m: out.print(m, highlight=False)))
    if as_json:
        out.print_json(json.dumps({"tools_venv": str(venv), "versions": versions}, default=str))


@fitness_app.command("history", cls=FitnessCommand)
@pipeline_errors
def history_cmd(
    log: Annotated[Path | None, typer.Option(help="The pipeline log (default bench-results/fitness/pipeline.log).")] = None,
    model: Annotated[list[str] | None, typer.Option(help="Only this model (repeatable).")] = None,
    metric: Annotated[list[str] | None, typer.Option(help="Only this metric or prefix, e.g. capability (repeatable).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where the plots go (default: each model's latest "
                                                               "report folder).")] = None,
    last: Annotated[int, typer.Option(help="Runs shown in the terminal tables.", min=1, max=1000)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """The runs in the pipeline log: a table of runs, the trend per model and metric (a PNG per
    model), and the regressions flagged against each previous run (2·SE; 10 % where no SE)."""
    from harness.cli.common import project_root
    from harness.fitness import history, trend
    from harness.fitness.config import HistoryCfg

    path = log or history.log_path(project_root(), HistoryCfg())
    runs, bad = history.read(path)
    if not runs:
        raise UserError("no run in the pipeline log" if path.is_file() else "the pipeline log does not exist",
                        file=path, field="--log", fix="run `llms-benchmark fitness run ...` first, or name the log")
    models = list(dict.fromkeys(str(r.get("model")) for r in runs if not model or str(r.get("model")) in model))
    shown = []
    for name in models:
        mine = [r for r in runs if str(r.get("model")) == name]
        folder = out_dir or next((Path(r["report_dir"]) for r in reversed(mine)
                                  if r.get("report_dir") and Path(r["report_dir"]).is_dir()), path.parent / "history")
        slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        try:
            plot = trend.draw(mine, name, Path(folder) / f"{slug}.png", only=metric)
        except PreflightError as exc:  # the `plots` extra is not installed: the tables still print
            plot = None
            err.print(f"[yellow]no plot:[/yellow] {escape(exc.render())}", highlight=False)
        shown.append({"model": name, "runs": mine, "plot": str(plot) if plot else None})
    if as_json:
        out.print_json(json.dumps({"log": str(path), "unreadable_lines": bad, "models": shown}, default=str))
        return
    table = Table("run", "finished", "model", "verdict", "exit", "retries", "flagged", title=f"fitness runs ({path})")
    for r in runs[-last:]:
        if model and str(r.get("model")) not in model:
            continue
        flags = ", ".join(f"{f['kind'].upper()} {f['metric']}" for f in r.get("regressions") or [])
        table.add_row(r["run_id"], str(r.get("finished_utc")), str(r.get("model")), str(r.get("verdict")),
                      str(r.get("exit_code")), str(r.get("retries", 0)), flags or "—")
    out.print(table)
    for m in shown:
        keys = trend.metrics_of(m["runs"], metric)
        t = Table("metric", "runs (oldest → newest)", "latest", "vs previous", "flag", title=f"trend: {m['model']}")
        for key in keys:
            values = [r["metrics"].get(key) for r in m["runs"]][-last:]
            present = [v for v in values if isinstance(v, (int, float))]
            delta = f"{present[-1] - present[-2]:+.4g}" if len(present) > 1 else "—"
            flag = next((f["kind"].upper() for f in m["runs"][-1].get("regressions") or [] if f["metric"] == key), "")
            t.add_row(key, " ".join("·" if v is None else f"{v:.4g}" for v in values),
                      f"{present[-1]:.4g}" if present else "—", delta, flag)
        out.print(t)
        out.print(f"plot: {m['plot'] or '(no metric with a value)'}", highlight=False)
    if bad:
        err.print(f"[yellow]{bad} line(s) of {path} are not runs and were left out[/yellow]", highlight=False)


@fitness_app.command("metrics", cls=FitnessCommand)
def metrics_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Every metric a threshold may name."""
    from harness.fitness.metrics import METRICS

    if as_json:
        out.print_json(json.dumps([{"metric": m.name, "per_context": m.per_context, "unit": m.unit,
                                    "better": m.better, "gates": m.gates, "meaning": m.meaning}
                                   for m in METRICS.values()]))
        return

    table = Table("metric", "unit", "better", "meaning")
    for m in METRICS.values():
        table.add_row(m.name + ("@<context>" if m.per_context else ""), m.unit, m.better,
                      m.meaning + ("" if m.gates else " (advisory: never gates)"))
    out.print(table)


@fitness_app.command("serve", cls=FitnessCommand)
@pipeline_errors
def serve_cmd(
    host: Annotated[str, typer.Option(help="Bind address (loopback unless told otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port, 1..65535 (0: any free one, printed).")] = 8088,
    token_env: Annotated[str, typer.Option(help="NAME of the env var holding the bearer token.")] = "",
    runs_dir: Annotated[Path | None, typer.Option(help="Where runs' report folders go.")] = None,
) -> None:
    """The HTTP API: POST /api/runs, GET /api/runs/<id> and its /report, POST /api/runs/<id>/cancel, GET /api/health."""
    from harness.cli.common import project_root

    try:
        from harness.fitness.api import serve
    except ImportError as exc:  # FastAPI/uvicorn are the `api` extra
        from harness.extras import extra_of, missing

        if extra_of(exc, among=("api",)) is None:
            raise
        raise missing("api", "`fitness serve` (the HTTP API)", exc) from None
    serve(project_root(), host=host, port=port, token_env=token_env or None,
          runs_dir=runs_dir or project_root() / "bench-results" / "fitness-api", say=say)
