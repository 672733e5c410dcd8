"""The `llms-benchmark` command line: one module per verb under `harness/cli/`, each thin
(parse, call one function, print with rich), and this list that builds the app from them.

A new verb is a module with `register(app)` and one entry in VERBS below. A sub-app that
lives with its own package (a `<package>/cli.py` exposing a typer app) is one `add_typer` line
in SUB_APPS below, so that its package needs nothing from this one.
"""

from __future__ import annotations

import typer

from harness.cli import (
    classroom, collect, launch, load, matrix, metrics, mission, preflight, probe, render, rule, score, stop, units,
    validate, wait,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Serve a preset, run a coding agent on a mission against it, measure what holds up.")

# The order of `--help`.
VERBS = (launch, matrix, wait, stop, mission, score, validate, preflight, units, probe, collect, rule, render, classroom, load, metrics)
for verb in VERBS:
    verb.register(app)

# SUB_APPS: typer apps owned by other packages, one line each.
from harness.fitness.cli import fitness_app  # noqa: E402 - the `fitness` verbs (harness/fitness/cli.py)

app.add_typer(fitness_app, name="fitness")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
