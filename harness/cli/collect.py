"""`llms-benchmark collect`: read an opencode data directory's session figures.
`llms-benchmark collect-pending RUN_ID`: run the collect of a trial whose launch died after its
mission and before its collect (issue 61: nothing is served again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, emit, user_errors


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
    emit(data, as_json, table)


@user_errors
def collect_pending(run: Annotated[str, typer.Argument(help="The run id whose collect is pending.")],
                    as_json: JsonOpt = False) -> None:
    """Collect a trial whose launch died after its mission: its figures and verdict, nothing served."""
    from harness.cli.common import project_root, say
    from harness.launcher.pending import complete

    record = complete(project_root(), run, say)
    data = {"run_id": record.run_id, "status": record.status.value, "reason": record.reason}
    table = Table("run", "status", "reason")
    table.add_row(record.run_id, record.status.value, record.reason or "")
    emit(data, as_json, table)


def register(app: typer.Typer) -> None:
    app.command()(collect)
    app.command("collect-pending")(collect_pending)
