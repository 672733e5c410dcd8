"""`llms-benchmark score`: recompute a results row's Scoring from its cells."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.common import JsonOpt, PageOpt, emit, err, out, project_root, user_errors


app = typer.Typer(no_args_is_help=True, help="Recompute a results row's Scoring from its cells.")


def _score_output(result, as_json: bool) -> None:
    if as_json:
        emit(result.to_dict(), True)
        return
    table = Table("axis", "points", "weight", title=f"{result.kind} scoring {result.score:.1f}")
    for axis, points in result.axes.items():
        table.add_row(axis, f"{points:.1f}", f"{result.weights[axis]:.3f}")
    emit({}, False, table)


UsdPerConfirmedOpt = Annotated[str | None, typer.Option(
    "--usd-per-confirmed", help="$/confirmed cell ($0.016 or 0.016); may be omitted with 0 confirmed.")]
SecondsPerConfirmedOpt = Annotated[str | None, typer.Option(
    "--seconds-per-confirmed", help="seconds/confirmed cell (56s or 56); may be omitted with 0 confirmed.")]
TotalOpt = Annotated[str, typer.Option("--total", help="Total cell: NmSSs (150m02s) or seconds (9002).")]
AccuracyOpt = Annotated[str, typer.Option("--accuracy", help="Accuracy cell (88% or 88).")]
ConfirmedOpt = Annotated[str, typer.Option("--confirmed", help="Confirmed findings (7, or the cell 7 / 8).")]


@app.command("local")
@user_errors
def score_local_cmd(total: TotalOpt, accuracy: AccuracyOpt, confirmed: ConfirmedOpt,
                    seconds_per_confirmed: SecondsPerConfirmedOpt = None, as_json: JsonOpt = False) -> None:
    """Score a local-serving row: seconds/confirmed 3/7, Total 2/7, Accuracy 1/7, Confirmed 1/7."""
    from harness.verdicts.scoring import score_local

    _score_output(score_local(seconds_per_confirmed, total, accuracy, confirmed), as_json)


@app.command("remote")
@user_errors
def score_remote_cmd(total: TotalOpt, accuracy: AccuracyOpt, confirmed: ConfirmedOpt,
                     usd_per_confirmed: UsdPerConfirmedOpt = None,
                     seconds_per_confirmed: SecondsPerConfirmedOpt = None, as_json: JsonOpt = False) -> None:
    """Score a remote-serving row: $/confirmed 0.30, seconds/confirmed 0.30, Total 0.20,
    Accuracy 0.10, Confirmed 0.10."""
    from harness.verdicts.scoring import score_remote

    _score_output(score_remote(usd_per_confirmed, seconds_per_confirmed, total, accuracy, confirmed), as_json)


@app.command("check")
@user_errors
def score_check_cmd(page: PageOpt = None, as_json: JsonOpt = False) -> None:
    """Recompute every Scoring cell from its own row, and check each table's ranks, order and bold marks; exit 1 if one disagrees."""

    from harness.results.check import check_rows
    from harness.results.render import PAGE, read_page

    path = page or project_root() / PAGE
    checked, problems = check_rows(read_page(path, missing_fix="render it with: llms-benchmark render"))
    if as_json:
        emit({"page": str(path), "rows": checked, "ok": not problems, "problems": problems}, True)
    else:
        for problem in problems:
            err.print(f"[bold red]disagrees:[/bold red] {escape(problem)}", highlight=False)
        out.print(f"{path}: {checked} rows, " + (f"{len(problems)} disagree" if problems
                                                 else "every Scoring, rank, order and bold mark agrees"),
                  highlight=False)
    raise typer.Exit(1 if problems else 0)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="score")
