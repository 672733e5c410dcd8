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
    from harness.results.render import PAGE, RecordsLeftOut, render_page

    root = project_root()
    path = page or root / PAGE
    left_out = None
    try:
        changed = render_page(root, path, include_scripted)
    except RecordsLeftOut as exc:  # the rest was rendered: say so, then name each one left out (exit 2)
        changed, left_out = exc.changed, exc
    if as_json:
        emit({"page": str(path), "changed": changed,
              "left_out": [{"file": p.file, "field": p.field, "problem": p.message, "fix": p.fix}
                           for p in (left_out.problems if left_out else [])]}, True)
    else:
        out.print(f"{path}: " + ("rewritten" if changed else "unchanged, already up to date")
                  + (f", without {len(left_out.problems)} run record(s)" if left_out else ""), highlight=False)
    if left_out is not None:
        raise left_out


def register(app: typer.Typer) -> None:
    app.command()(render)
