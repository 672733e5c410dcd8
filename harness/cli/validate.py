"""`llms-benchmark validate`: validate presets, environments and missions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harness.cli.common import err, out, project_root, user_errors
from harness.errors import UserError


@user_errors
def validate(paths: Annotated[list[Path], typer.Argument(help="Presets, environments or mission folders.")]) -> None:
    """Validate presets (.vot/presets/), environments (.vot/environments/) and missions (missions/<name>/)."""
    from harness.vot.validate import validate_path

    root = project_root()
    failed = 0
    for path in paths:
        try:
            out.print(validate_path(root, path), highlight=False)
        except UserError as exc:
            failed += 1
            err.print(f"[bold red]error:[/bold red] {escape(exc.render())}", highlight=False)
    if failed:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command()(validate)
