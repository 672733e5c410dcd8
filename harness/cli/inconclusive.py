"""`llms-benchmark inconclusive RUN`: enter a run that made no row as a non-conclusive entry."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import JsonOpt, emit, out, project_root, user_errors


@user_errors
def inconclusive(run: Annotated[str, typer.Argument(help="The run id, as `launch` printed it.")],
                 as_json: JsonOpt = False) -> None:
    """Enter a void, refused or fault run in non-conclusive.yaml with its reason; its folder leaves runs/."""
    from harness.results.inconclusive import enter

    root = project_root()
    done = enter(root, run)
    record = str(done.record.relative_to(root))
    if as_json:
        emit({"run_id": run, "entry": done.entry, "added": done.added, "record": record,
              "file": ".llms-benchmark/non-conclusive.yaml"}, True)
        return
    said = "entered in" if done.added else "already in"
    out.print(f"run {run} {said} .llms-benchmark/non-conclusive.yaml: {done.entry['reason']}\n"
              f"  record: {record} (out of git)\n"
              "  then: llms-benchmark render, and stage .llms-benchmark/non-conclusive.yaml .llms-benchmark/README.md",
              highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(inconclusive)
