"""`llms-benchmark matrix`: presets × efforts on one environment, K trials per cell, cells
on separate units at once, resumable, within a GPU budget. It sits above `launch` and never
inside it: each cell is a launch (serve once, K trials, destroy) in its own process.

    plan.py    the plan (.vot/matrices/<name>.yaml or flags), checked before anything runs
    state.py   the state (.llms-benchmark/matrices/<name>/state.json), written after every change
    quota.py   Azure's GPU quota (the usage "Managed Environment Consumption NCA100 GPUs")
    bound.py   a cell's budget bound: its whole serve, from the preset's earlier records
    spend.py   what was spent and which trials are finished, read from the run records
    runner.py  the loop: start what fits, queue quota refusals, retry transient faults, hold the
               budget, forward signals, record each cell
    report.py  the live table, the plain status line and the matrix report
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.matrix.plan import MatrixPlan, check_plan
from harness.matrix.report import live_table, matrix_report, status_line
from harness.matrix.resume import prepare
from harness.matrix.runner import MatrixRun
from harness.matrix.state import Cell, MatrixState, StateFolder

__all__ = ["MatrixPlan", "run_matrix"]
LIVE_REFRESH_S = 1.0
STATUS_EVERY_S = 30.0  # --display plain: a status line this often
DISPLAYS = ("auto", "rich", "plain")


def _cap(env, plan: MatrixPlan, say):
    """(cap, why, the quota when it is full): a quota full at preflight queues the cells."""
    why = f"--parallel {plan.parallel}"
    if env.stack != "azure":
        return plan.parallel, why, None
    from harness.matrix.quota import read_gpu_quota

    quota = read_gpu_quota(env)
    if quota is None:
        say("Azure reports no NCA100 GPU quota usage; the cap is --parallel alone (a refusal still queues the cell)")
        return plan.parallel, f"{why}; no quota usage reported", None
    say(f"GPU quota: {quota.describe()}")
    if quota.free < 1:
        return plan.parallel, f"the GPU quota, full at preflight: {quota.describe()}", quota
    if quota.free < plan.parallel:
        return quota.free, f"the GPU quota: {quota.describe()}", None
    return plan.parallel, f"{why}; {quota.describe()}", None


def run_matrix(root: Path, plan: MatrixPlan, plan_file: Path | None, *, fresh: bool, say: Callable[[str], None],
               console: Console, display: str = "auto",
               status_every_s: float = STATUS_EVERY_S) -> tuple[int, MatrixState, Path]:
    """Run (or resume) the plan; returns (exit code, final state, report path). `display`:
    `rich` (the live table), `plain` (a status line every `status_every_s`), or `auto` (the
    table on a terminal, else plain)."""
    from harness.mission import load_mission
    from harness.records.paths import ProjectPaths
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
    # Leftovers first: a unit a dead launch left (this matrix's own, after a crash) would hold
    # a GPU of the quota, bill on, and keep its records open; swept before anything is read.
    for name in destroy_leftovers(root, say):
        say(f"swept {name} before the matrix")
    if state is None:
        state = MatrixState(name=plan.name, identity=plan.identity(), environment=plan.environment,
                            mission=plan.mission, trials=plan.trials,
                            cells=[Cell(preset=p, effort=e) for p, e in plan.cells()])
    else:
        say(f"resuming matrix {plan.name} (started {state.created:%Y-%m-%dT%H:%M:%SZ}): "
            f"{sum(c.status.final for c in state.cells)} of {len(state.cells)} cells finished")
    state.budget_usd, state.gpu_hourly_usd = plan.budget_usd, env.gpu_hourly_usd
    for note in prepare(state, plan, root):
        say(note)
    state.parallel, state.parallel_why, quota_full = _cap(env, plan, say)
    state.runs += 1
    cap_minutes = load_mission(root, plan.mission).manifest.time_cap_minutes
    read_quota = None
    if env.stack == "azure":
        from harness.matrix.quota import read_gpu_quota

        read_quota = lambda: read_gpu_quota(env)  # noqa: E731 - read again while the quota is full

    live = None
    last = [0.0]
    plain = display == "plain" or (display == "auto" and not console.is_terminal)

    def view(run: MatrixRun, final: bool) -> None:
        now = time.monotonic()
        if plain:
            if final or now - last[0] >= status_every_s:
                last[0] = now
                say(status_line(run))
            return
        if live is None:
            return
        if final or now - last[0] >= LIVE_REFRESH_S:
            last[0] = now
            live.update(live_table(run), refresh=True)

    run = MatrixRun(root, plan, folder, state, cap=state.parallel, cap_minutes=cap_minutes, say=say, view=view,
                    read_quota=read_quota, quota_full=quota_full)
    if plain:
        last[0] = time.monotonic()  # the first line after one interval: the start is said already
        code = run.run()
        console.print(live_table(run))
    else:
        from rich.live import Live

        with Live(live_table(run), console=console, auto_refresh=False, transient=False) as live:
            code = run.run()
    write_atomic(folder.report, matrix_report(root, state))
    page = ProjectPaths(root).page
    if page.is_file():  # the results page, re-rendered once for the whole matrix
        from harness.results.render import render_page

        try:
            render_page(root, page)
        except UserError as exc:
            say(f"the results page was rendered without some records: {exc.message}")
    return code, state, folder.report
