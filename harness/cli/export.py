"""`llms-benchmark export RUN --atif | --otel FILE|URL`: a run's trajectory in the field's formats.

`--atif` writes RUN/trajectory.json (ATIF, validated; a launch writes it itself, this is for runs
recorded before it did); `--otel` sends the run as OpenTelemetry GenAI spans to an OTLP/HTTP URL,
or writes them to FILE as OTLP/JSON (harness/trajectory/otel.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import JsonOpt, emit, out, project_root, user_errors
from harness.errors import UserError


def run_folder(run: str) -> Path:
    """RUN as a run folder: a path to one, or a run id under .llms-benchmark/runs (inconclusive/, refused/)."""
    from harness.records.paths import RUN_RECORD, ProjectPaths

    if not run or len(run) > 4096:
        raise UserError("no run given", field="RUN", fix="give a run folder or the run id `launch` printed")
    try:
        given = Path(run)
        if (given / RUN_RECORD).is_file():
            return given
    except OSError:
        pass
    paths = ProjectPaths(project_root())
    if "/" not in run and run not in (".", ".."):
        for folder in (paths.runs, paths.inconclusive, paths.refused):
            if (folder / run / RUN_RECORD).is_file():
                return folder / run
    raise UserError(f"no run {run[:200]!r}: not a folder holding run.json, nor a run id under "
                    ".llms-benchmark/runs, inconclusive/ or refused/", file=paths.runs, field="RUN",
                    fix="give a run folder or the run id `launch` printed (ls .llms-benchmark/runs)")


@user_errors
def export(run: Annotated[str, typer.Argument(help="A run folder, or a run id under .llms-benchmark/runs.")],
           atif: Annotated[bool, typer.Option("--atif", help="Write RUN/trajectory.json (ATIF, validated).")] = False,
           otel: Annotated[str | None, typer.Option(
               "--otel", metavar="FILE|URL",
               help="Send the run as OpenTelemetry GenAI spans to an OTLP/HTTP URL, or write them to FILE "
                    "(OTLP/JSON).")] = None,
           as_json: JsonOpt = False) -> None:
    """Export a run's trajectory: ATIF (--atif) and/or OpenTelemetry GenAI spans (--otel FILE|URL)."""
    if not atif and not otel:
        raise UserError("nothing to export", field="--atif/--otel",
                        fix="add --atif (trajectory.json) and/or --otel FILE|URL (OpenTelemetry spans)")
    if otel:
        from harness.trajectory.otel import _sdk

        _sdk()  # refused, naming the extra, before anything is built
    from harness.trajectory.atif_out import build_trajectory, write_trajectory

    folder = run_folder(run)
    done: dict = {"run": folder.name}
    if atif:
        written = write_trajectory(folder)
        try:
            written = written.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            pass  # outside the working folder: named in full
        done["atif"] = str(written)
    if otel:
        from harness.trajectory.otel import export as export_otel

        count, where = export_otel(build_trajectory(folder), otel)
        done["otel"] = {"spans": count, "to": where}
    if as_json:
        emit(done, True)
        return
    if atif:
        out.print(f"wrote {done['atif']}", highlight=False, soft_wrap=True)
    if otel:
        out.print(f"{done['otel']['spans']} spans to {done['otel']['to']}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(export)
