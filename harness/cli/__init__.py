"""The `llms-benchmark` command line: one module per verb under `harness/cli/`, each thin
(parse, call one function, print with rich), and this list that builds the app from them.

A new verb is a module with `register(app)`, one entry in VERBS and its commands in COMMANDS
below. A sub-app that lives with its own package (a `<package>/cli.py` exposing a typer app) is
one entry in SUB_APPS, so that its package needs nothing from this one.

`llms-benchmark <command> ...` imports only the module that registers that command: every
module's imports together (httpx, jsonschema, pydantic's models, the mission code) cost more than
most commands' own work (measured: 0.5 s a call, `--help` included). `--help`, no command or an
unknown one build the whole app, so help and "No such command" read as before.
"""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperGroup

HELP = "Serve a preset, run a coding agent on a mission against it, measure what holds up."
# The order of `--help`.
VERBS = ("launch", "matrix", "wait", "stop", "mission", "score", "validate", "preflight", "units", "probe",
         "collect", "rule", "render", "inconclusive", "query", "export", "classroom", "load", "metrics")
# command -> the module under harness/cli/ that registers it (tests/test_cli_commands.py checks
# this against what each module registers).
COMMANDS = {**{verb: verb for verb in VERBS if verb not in ("units", "load")},
            "serve": "units", "destroy": "units", "units": "units", "collect-pending": "collect",
            "load": "load", "load-trace": "load", "load-agents": "load"}
# name -> (module, attribute): typer apps owned by other packages.
SUB_APPS = {"fitness": ("harness.fitness.cli", "fitness_app")}  # harness/fitness/cli.py
# `--help` shows the commands in these panels, in this order: the main job first.
PANELS = {
    "Run the benchmark": ("launch", "wait", "stop", "matrix", "preflight", "validate", "mission", "collect-pending"),
    "Results": ("rule", "render", "score", "inconclusive", "query", "export", "collect"),
    "Serve by hand": ("serve", "destroy", "units", "probe", "metrics"),
    "Load": ("load", "load-trace", "load-agents", "classroom"),
    "Fitness": ("fitness",),
}
ORDER = [name for names in PANELS.values() for name in names]
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}


class GroupedCommands(TyperGroup):
    """The commands listed in ORDER (typer lists plain commands before sub-apps, which put
    `launch` 21st of 24), each in its PANELS panel; a command not in ORDER comes last."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        for name in names:
            if name in PANEL_OF:
                self.commands[name].rich_help_panel = PANEL_OF[name]
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))


def build(verbs: tuple[str, ...] = VERBS, sub_apps: tuple[str, ...] = tuple(SUB_APPS)) -> typer.Typer:
    """The app with the commands of `verbs` and the sub-apps named in `sub_apps`."""
    app = typer.Typer(cls=GroupedCommands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help=HELP)
    if len(verbs) + len(sub_apps) < len(VERBS) + len(SUB_APPS):
        # typer runs a lone command as the program itself; a callback keeps `<command>` a subcommand.
        app.callback()(lambda: None)
    for verb in verbs:
        importlib.import_module(f"harness.cli.{verb}").register(app)
    for name in sub_apps:
        module, attribute = SUB_APPS[name]
        app.add_typer(getattr(importlib.import_module(module), attribute), name=name)
    return app


def for_argv(argv: list[str]) -> typer.Typer:
    """The app a command line needs: its command's module only, or the whole app."""
    command = argv[0] if argv else None
    if command in COMMANDS:
        return build((COMMANDS[command],), ())
    if command in SUB_APPS:
        return build((), (command,))
    return build()


def __getattr__(name: str):
    if name == "app":  # the whole app, built on first use (docs, tests)
        globals()["app"] = whole = build()
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    for_argv(sys.argv[1:])()


if __name__ == "__main__":
    main()
