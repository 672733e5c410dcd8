"""`llms-benchmark matrix`: presets × efforts on one environment, K trials per cell, cells
on separate units at once, resumable, within a GPU budget. It sits above `launch` and never
inside it: each cell is a launch (serve once, K trials, destroy) in its own process.

    plan.py    the plan (.vot/matrices/<name>.yaml or flags), checked before anything runs
    state.py   the state (.llms-benchmark/matrices/<name>/state.json), written after every change
    quota.py   Azure's GPU quota (the usage "Managed Environment Consumption NCA100 GPUs")
    runner.py  the loop: start what fits, queue quota refusals, forward signals, record each cell
    report.py  the live table and the matrix report
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.matrix.plan import MatrixPlan, check_plan
from harness.matrix.report import live_table, matrix_report
from harness.matrix.runner import MatrixRun, prepare
from harness.matrix.state import Cell, MatrixState, StateFolder

__all__ = ["MatrixPlan", "run_matrix"]
LIVE_REFRESH_S = 1.0


def _cap(env, plan: MatrixPlan, say) -> tuple[int, str]:
    why = f"--parallel {plan.parallel}"
    if env.stack != "azure":
        return plan.parallel, why
    from harness.matrix.quota import read_gpu_quota

    quota = read_gpu_quota(env)
    if quota is None:
        say("Azure reports no NCA100 GPU quota usage; the cap is --parallel alone (a refusal still queues the cell)")
        return plan.parallel, f"{why}; no quota usage reported"
    say(f"GPU quota: {quota.describe()}")
    if quota.free < 1:
        raise UserError(f"no A100 GPU free in the quota: {quota.describe()}", file=env.path, field="stack",
                        fix="wait for the apps using them to be destroyed (`az containerapp list -g <rg>`), or request "
                            "more 'Managed Environment Consumption NCA100 GPUs' on the environment's Quota page")
    if quota.free < plan.parallel:
        return quota.free, f"the GPU quota: {quota.describe()}"
    return plan.parallel, f"{why}; {quota.describe()}"


def run_matrix(root: Path, plan: MatrixPlan, plan_file: Path | None, *, fresh: bool, say: Callable[[str], None],
               console: Console) -> tuple[int, MatrixState, Path]:
    """Run (or resume) the plan; returns (exit code, final state, report path)."""
    from harness.mission import load_mission
    from harness.run.paths import ProjectPaths
    from harness.run.units import destroy_leftovers
    from harness.vot.environment import load_environment

    check_plan(root, plan, plan_file)
    folder = StateFolder(root, plan.name)
    folder.lock()
    if fresh and (moved := folder.archive()) is not None:
        say(f"--fresh: the earlier state moved to {moved.relative_to(root)}")
    state = folder.load()
    if state is not None and state.identity != plan.identity():
        raise UserError(f"the plan {plan.name} changed (environment, cells, mission or trials) since its state was "
                        "written", file=folder.state, field="PLAN",
                        fix="pass --fresh to start over (the old state is kept beside it), or give the new plan "
                            "another name")
    env = load_environment(root, plan.environment)
    if state is None:
        state = MatrixState(name=plan.name, identity=plan.identity(), environment=plan.environment,
                            mission=plan.mission, trials=plan.trials,
                            cells=[Cell(preset=p, effort=e) for p, e in plan.cells()])
    else:
        say(f"resuming matrix {plan.name} (started {state.created:%Y-%m-%dT%H:%M:%SZ}): "
            f"{sum(c.status.final for c in state.cells)} of {len(state.cells)} cells finished")
    for note in prepare(state, plan):
        say(note)
    state.budget_usd, state.gpu_hourly_usd = plan.budget_usd, env.gpu_hourly_usd
    state.parallel, state.parallel_why = _cap(env, plan, say)
    state.runs += 1
    cap_minutes = load_mission(root, plan.mission).manifest.time_cap_minutes
    for name in destroy_leftovers(root, say):  # once, before the cells (whose launches would race for it)
        say(f"swept {name} before the matrix")

    live = None
    last = [0.0]

    def view(run: MatrixRun, final: bool) -> None:
        if live is None:
            return
        now = time.monotonic()
        if final or now - last[0] >= LIVE_REFRESH_S:
            last[0] = now
            live.update(live_table(run), refresh=True)

    run = MatrixRun(root, plan, folder, state, cap=state.parallel, cap_minutes=cap_minutes, say=say, view=view)
    if console.is_terminal:
        from rich.live import Live

        with Live(live_table(run), console=console, auto_refresh=False, transient=False) as live:
            code = run.run()
    else:
        code = run.run()
        console.print(live_table(run))
    write_atomic(folder.report, matrix_report(root, state))
    page = ProjectPaths(root).page
    if page.is_file():  # the results page, re-rendered once for the whole matrix
        from harness.results.render import render_page

        try:
            render_page(root, page)
        except UserError as exc:
            say(f"the results page was rendered without some records: {exc.message}")
    return code, state, folder.report
