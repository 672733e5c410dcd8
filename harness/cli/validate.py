"""`llms-benchmark validate`: validate presets, environments and missions (a folder: each in it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harness.cli.common import JsonOpt, err, out, project_root, user_errors
from harness.errors import UserError


@user_errors
def validate(paths: Annotated[list[Path], typer.Argument(
                 help="Presets, environments or mission folders; a folder of them (.vot/presets/, "
                      ".vot/environments/, .vot/, missions/) validates each one in it.")],
             as_json: JsonOpt = False) -> None:
    """Validate presets (.vot/presets/), environments (.vot/environments/) and missions (missions/<name>/)."""
    from harness.cli.validate_kinds import expand, validate_path

    root = project_root()
    results = []
    for given in paths:
        for path in expand(root, given):
            try:
                results.append({"path": str(path), "ok": True, "summary": validate_path(root, path)})
            except UserError as exc:
                results.append({"path": str(path), "ok": False, "error": exc.render()})
    if as_json:
        out.print_json(json.dumps({"ok": all(r["ok"] for r in results), "checked": results}))
    else:
        for r in results:
            if r["ok"]:
                out.print(r["summary"], highlight=False)
            else:
                err.print(f"[bold red]error:[/bold red] {escape(r['error'])}", highlight=False)
    if not all(r["ok"] for r in results):
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command()(validate)
