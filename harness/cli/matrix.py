"""`llms-benchmark matrix`: presets × efforts × K trials, each cell one launch on its own unit,
as many at once as `--parallel` and the engine's GPU quota allow, within `--budget-usd`.

The plan is `.vot/matrices/<PLAN>.yaml` or the flags (a flag overrides the plan's field).
Re-running the same plan resumes it; Ctrl-C destroys every unit in flight and records each cell.
"""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import JsonOpt, err, out, project_root, say, user_errors
from harness.errors import UserError
from harness.mission import DEFAULT_MISSION


@user_errors
def matrix(
    plan: Annotated[str | None, typer.Argument(help="A .vot/matrices/<name>.yaml name (or give the plan as flags).")]
    = None,
    environment: Annotated[str | None, typer.Option("--environment", "-e", help="A .vot/environments/<name>.yaml name.")]
    = None,
    preset: Annotated[list[str] | None, typer.Option("--preset", "-p", help="A preset (repeat for several).")] = None,
    effort: Annotated[list[str] | None, typer.Option("--effort", help="An effort (repeat; default medium).")] = None,
    mission: Annotated[str | None, typer.Option(help=f"Mission under missions/ (default {DEFAULT_MISSION}).")] = None,
    trials: Annotated[int | None, typer.Option(min=1, max=20, help="Trials per cell, on one serve.")] = None,
    parallel: Annotated[int | None, typer.Option(
        min=1, max=16, help="Cells at once (also capped by the GPU quota on Azure).")] = None,
    budget_usd: Annotated[float | None, typer.Option(
        "--budget-usd", help="GPU budget: a cell starts only if spent + its bound fits.")] = None,
    name: Annotated[str | None, typer.Option(help="The state's name for a plan given as flags.")] = None,
    no_sandbox: Annotated[bool, typer.Option("--no-sandbox", help="Run every cell's agent unconfined.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over (the earlier state is kept beside it).")] = False,
    display: Annotated[str, typer.Option(
        "--display", help="rich: the live table; plain: a status line every --status-every seconds (for logs); "
                          "auto: the table on a terminal, else plain.")] = "auto",
    status_every: Annotated[float, typer.Option(
        "--status-every", min=1, max=3600, help="Seconds between status lines with --display plain.")] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Run a matrix of presets × efforts × trials, cells at once on separate units; resumable."""
    from harness.matrix import DISPLAYS, run_matrix
    from harness.matrix.plan import MatrixPlan, load_plan, plan_path, validate_plan

    root = project_root()
    if display not in DISPLAYS:
        raise UserError(f"--display {display[:40]!r} is not a display", field="--display",
                        fix=f"use one of: {', '.join(DISPLAYS)}")
    flags = {k: v for k, v in {"environment": environment, "presets": preset or None, "efforts": effort or None,
                               "mission": mission, "trials": trials, "parallel": parallel,
                               "budget_usd": budget_usd}.items() if v is not None}
    if no_sandbox:
        flags["no_sandbox"] = True
    if plan is not None:
        base = load_plan(root, plan)
        file = plan_path(root, plan)
        if name is not None:
            raise UserError("--name is for a plan given as flags; a plan file is named by its file", field="--name",
                            fix="drop --name")
        the_plan = validate_plan({**base.model_dump(), **flags}, file)
    else:
        file = None
        for needed, flag in (("environment", "--environment"), ("presets", "--preset")):
            if needed not in flags:
                raise UserError(f"no plan and no {flag}", field=flag,
                                fix="name a plan (.vot/matrices/<name>.yaml) or give --environment and --preset")
        draft = validate_plan({"name": name or "adhoc", **flags})
        the_plan = draft if name else MatrixPlan.model_validate(
            {**draft.model_dump(), "name": f"{draft.environment}-{draft.identity()[:8]}"})
    code, state, report = run_matrix(root, the_plan, file, fresh=fresh, say=say, console=err, display=display,
                                     status_every_s=status_every)
    if as_json:
        out.print_json(state.model_dump_json())
    else:
        out.print(f"matrix {state.name}: report {report.relative_to(root)}", highlight=False)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(matrix)
