"""`llms-benchmark launch`: run the benchmark end to end."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from harness.cli.common import JsonOpt, err, out, project_root, say, user_errors
from harness.mission import DEFAULT_MISSION


MAX_TRIALS = 20  # each trial is a whole mission run on the serve: bounded

app = typer.Typer(no_args_is_help=True, help="Run the benchmark end to end.")


@app.command("local")
@user_errors
def launch_local_cmd(
    environment: Annotated[str, typer.Argument(help="A .vot/environments/<name>.yaml name.")],
    preset: Annotated[str, typer.Argument(help="A .vot/presets/<name>.yaml name.")],
    effort: Annotated[str, typer.Argument(help="Reasoning effort (low, medium, high).")] = "medium",
    mission: Annotated[str, typer.Option(help="Mission under missions/.")] = DEFAULT_MISSION,
    probe_long_tokens: Annotated[int, typer.Option(help="Long-context probe size (0: 82k where the context allows).")] = 0,
    no_sandbox: Annotated[bool, typer.Option(
        "--no-sandbox", help="Run the agent unconfined (the record and the results row say so).")] = False,
    stop_after_report: Annotated[int, typer.Option(
        min=0, help="End the run once its report has stood N model turns unchanged (0: never); it still counts. "
                    "`llms-benchmark stop RUN` does the same by hand.")] = 0,
    trials: Annotated[int, typer.Option(
        min=1, max=MAX_TRIALS, help="Run the mission K times on one serve (probed and smoked once), each trial "
                                    "on a fresh workspace, store and mission stack, each its own run record.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Serve PRESET on ENVIRONMENT once, probe it, run the mission with opencode, destroy, record."""
    from harness.launch import LaunchOptions, launch_local
    from harness.summary import run_summary_table

    records = launch_local(LaunchOptions(project_root(), environment, preset, effort, mission,
                                         probe_long_tokens or None, sandbox=not no_sandbox,
                                         stop_after_report=stop_after_report or None, trials=trials), say)
    if as_json:
        # One trial: its record, as ever; K trials: the list of their records.
        out.print_json(records[0].model_dump_json() if trials == 1
                       else "[" + ",".join(r.model_dump_json() for r in records) + "]")
    else:
        for record in records:
            out.print(run_summary_table(record))
    for record in records:
        if record.reason:
            where = f" (trial {record.trial.index})" if record.trial else ""
            err.print(f"[bold red]{record.status.value}{where}:[/bold red] {escape(record.reason or '')}",
                      highlight=False)
    if trials > 1 and len(records) < trials:
        err.print(f"[bold red]{len(records)} of {trials} trials ran[/bold red]: the launch ended in trial "
                  f"{len(records)}", highlight=False)
    # The worst trial's exit code: 0 only when every trial asked for made a row.
    raise typer.Exit(max(r.status.exit_code for r in records))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="launch")
