"""`llms-benchmark collect`: read an opencode data directory's session figures."""

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


def register(app: typer.Typer) -> None:
    app.command()(collect)
