"""`llms-benchmark stop <run>`: end a running launch's run once its report is persisted.

The run stays ok (`run.ended_by` says it was stopped after its report): for a post-report
stretch that can no longer change the report (harness/stages/report_stop.py). Before a
report exists the launch keeps going and stops as soon as one is written; Ctrl-C is the
way to end a run with no report (void, as ever).
"""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import JsonOpt, emit, project_root, say, user_errors
from harness.errors import UserError
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord


@user_errors
def stop(run: Annotated[str, typer.Argument(help="The run id (a unique prefix will do), as `launch` printed it.")],
         as_json: JsonOpt = False) -> None:
    """Stop RUN once its report is persisted: the run counts, stopped after its report."""
    runs = ProjectPaths(project_root()).runs
    matches = sorted(p for p in runs.glob(f"{run}*") if p.is_dir()) if run and "/" not in run else []
    if len(matches) != 1:
        raise UserError(f"no single run matches {run!r} ({len(matches)} do)", file=runs, field="run",
                        fix="pass the run id `launch` printed (`run 2026…`), or a prefix only it has")
    paths = ProjectPaths(project_root()).run(matches[0].name)
    record = RunRecord.load(paths.record) if paths.record.is_file() else None
    if record is None or record.times.end is not None:
        raise UserError(f"run {matches[0].name} is not running", file=paths.record, field="times.end",
                        fix="only a launch still running its mission can be stopped")
    if record.times.mission_start is None:
        raise UserError(f"run {matches[0].name} has not started its mission yet", file=paths.record,
                        field="times.mission_start", fix="ask again once the mission runs (Ctrl-C ends it now)")
    paths.stop_request.write_text("stop after the report\n")
    say(f"stop asked for run {matches[0].name}: it ends once its report is persisted "
        "(at once if it is; the report as it stands then is the run's)")
    if as_json:
        emit({"run_id": matches[0].name, "stop_asked": True,
              "request": str(paths.stop_request.relative_to(project_root()))}, True)


def register(parent: typer.Typer) -> None:
    parent.command("stop")(stop)
