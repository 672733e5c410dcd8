"""`llms-benchmark render`: render the results page."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import JsonOpt, PageOpt, emit, out, project_root, user_errors


@user_errors
def render(page: PageOpt = None,
           include_scripted: Annotated[bool, typer.Option(
               "--include-scripted", help="Also row scripted replay runs (demos and tests; needs --page).")] = False,
           as_json: JsonOpt = False) -> None:
    """Render the results tables (run records + final rulings, remote rows) into the page between its markers."""
    from harness.results.render import PAGE, render_page

    root = project_root()
    path = page or root / PAGE
    changed = render_page(root, path, include_scripted)
    if as_json:
        emit({"page": str(path), "changed": changed}, True)
    else:
        out.print(f"{path}: " + ("rewritten" if changed else "unchanged, already up to date"), highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(render)
