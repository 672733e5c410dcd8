"""What a matrix shows: the live table (cells × status × elapsed × GPU $) on a terminal, or a
plain status line every N seconds without one, while it runs; at the end the matrix report
(markdown): each cell's row, its trials' spread (kept over every launch) and, for a cell
without a row, its non-conclusive reason. Rendered from the state and the run records alone."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from harness import markdown_table
from harness.matrix.spend import load_records, settle_state
from harness.matrix.state import Cell, CellStatus, MatrixState
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status
from harness.results.cells import format_duration

STYLE = {CellStatus.done: "green", CellStatus.running: "cyan", CellStatus.queued: "yellow",
         CellStatus.over_budget: "magenta", CellStatus.fault: "red", CellStatus.void: "red",
         CellStatus.refused: "red", CellStatus.gave_up: "red", CellStatus.interrupted: "yellow"}


def live_table(run) -> Table:
    """The matrix now: `run` is the MatrixRun (it knows what is in flight)."""
    state: MatrixState = run.state
    budget = f" of ${state.budget_usd:.2f}" if state.budget_usd is not None else ""
    table = Table(title=f"matrix {state.name}: {state.environment}, mission {state.mission}, "
                        f"{state.trials} trial(s) per cell",
                  caption=f"GPU ${run.spent_usd():.2f}{budget} · {len(run.running)} running, at most {state.parallel} "
                          f"({state.parallel_why})", caption_justify="left")
    for name, justify in (("cell", "left"), ("status", "left"), ("launch", "right"), ("elapsed", "right"),
                          ("GPU $", "right"), ("note", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for cell in state.cells:
        style = STYLE.get(cell.status, "")
        cost = run.live_cost(cell)
        table.add_row(cell.id, f"[{style}]{cell.status.value}[/{style}]" if style else cell.status.value,
                      str(len(cell.attempts) or "—"), elapsed_or_dash(run.elapsed(cell) if cell.attempts else None),
                      f"{cost:.2f}" if cell.attempts else "—", escape((cell.reason or "")[:160]))
    return table


def status_line(run) -> str:
    """One line for a log (`--display plain`): elapsed, cells by status, GPU-hours and $ against the budget."""
    state: MatrixState = run.state
    count = {s: sum(1 for c in state.cells if c.status == s) for s in CellStatus}
    waiting = count[CellStatus.pending] + count[CellStatus.interrupted]
    ended = sum(n for s, n in count.items() if s.final and s != CellStatus.done) + count[CellStatus.over_budget]
    usd = run.spent_usd()
    hours = usd / state.gpu_hourly_usd if state.gpu_hourly_usd else sum(c.gpu_hours for c in state.cells)
    budget = f" of ${state.budget_usd:.2f}" if state.budget_usd is not None else " (no budget)"
    return (f"matrix {state.name} {elapsed_or_dash(time.monotonic() - run.t0)}: {count[CellStatus.done]} done, "
            f"{len(run.running)} running, {count[CellStatus.queued]} queued, {waiting} waiting"
            + (f", {ended} ended without a row" if ended else "") + f" of {len(state.cells)} · "
            f"GPU {hours:.4f} h, ${usd:.2f}{budget}")


def elapsed_or_dash(seconds: float | None) -> str:
    return "—" if seconds is None else f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def cell_records(root: Path, cell: Cell) -> list[RunRecord]:
    """The cell's trials: those kept from every launch, then the last launch's others."""
    if not cell.attempts:
        return []
    paths = ProjectPaths(root)
    kept = [r for a in cell.attempts for r in load_records(paths, a.finished)]
    seen = {r.run_id for r in kept}
    return kept + [r for r in load_records(paths, cell.attempts[-1].run_ids) if r.run_id not in seen]


def _span(values: list[float], fmt) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(min(values))}–{fmt(max(values))} (median {fmt(statistics.median(values))})"


def trials_spread(records: list[RunRecord], of: int) -> str:
    ok = [r for r in records if r.status == Status.ok]
    missions = [(r.times.mission_end - r.times.mission_start).total_seconds() for r in ok
                if r.times.mission_start and r.times.mission_end]
    turns = [float(f[1]) for r in ok if (f := r.figures()) is not None]
    parts = [f"{min(len(ok), of)} of {of} with a row"]
    if missions:
        parts.append(f"mission {_span(missions, format_duration)}")
    if turns:
        parts.append(f"turns {_span(turns, lambda x: f'{x:g}')}")
    return " · ".join(parts)


def non_conclusive(cell: Cell, records: list[RunRecord]) -> str:
    if cell.status == CellStatus.done:
        return ""
    bad = [r for r in records if r.status != Status.ok and r.reason]
    why = cell.reason or (bad[0].reason if bad else "")
    return why or cell.status.value  # a cell of the report: markdown_table escapes it


def matrix_report(root: Path, state: MatrixState) -> str:
    """The matrix report (markdown). Its spending is the records' (`spend.settle_state`)."""
    settle_state(root, state)
    price = state.gpu_hourly_usd
    lines = [f"# Matrix `{state.name}`", "",
             f"- environment `{state.environment}`, mission `{state.mission}`, {state.trials} trial(s) per cell "
             "(one serve each)",
             f"- at most {state.parallel} cells at once ({state.parallel_why})",
             f"- GPU spent: ${state.spent_usd():.2f}" + (f" at ${price:g}/GPU-h" if price else " (no price)")
             + (f", budget ${state.budget_usd:.2f}" if state.budget_usd is not None else ", no budget"),
             f"- updated {state.updated:%Y-%m-%dT%H:%M:%SZ}"
             + (f"; stopped by {state.interrupted} (resume: run the same plan again)" if state.interrupted else ""),
             "",
             markdown_table.row(["Cell", "Status", "Launches", "Runs", "Trials", "GPU h", "GPU $",
                                 "Non-conclusive reason"]),
             markdown_table.rule(8)]
    for cell in state.cells:
        records = cell_records(root, cell)
        runs = ", ".join(f"[{r.run_id}](../../runs/{r.run_id}/run.json)" for r in records) or "—"
        spread = trials_spread(records, state.trials) if records else "—"
        hours = cell.gpu_hours
        lines.append(markdown_table.row([
            f"`{cell.preset}` {cell.effort}", cell.status.value, len(cell.attempts), runs, spread,
            f"{hours:.4f}" if cell.attempts else "—",
            f"{hours * price:.2f}" if cell.attempts and price else "—",
            non_conclusive(cell, records)]))
    return "\n".join(lines) + "\n"
