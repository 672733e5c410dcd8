"""`llms-benchmark <command>` builds only the module that registers that command
(harness/cli/__init__.py): the map from command to module is checked against what each module
registers, and every command runs from its lone module as it does from the whole app."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import harness.cli as cli


def _registered(verb: str) -> set[str]:
    return set(get_command(cli.build((verb,), ())).commands)


def test_every_command_maps_to_the_module_that_registers_it():
    whole = set(get_command(cli.app).commands)
    assert whole == set(cli.COMMANDS) | set(cli.SUB_APPS)
    for verb in cli.VERBS:
        assert _registered(verb) == {c for c, m in cli.COMMANDS.items() if m == verb}, verb


@pytest.mark.parametrize("command", [*cli.COMMANDS, *cli.SUB_APPS])
def test_each_command_alone_reads_as_in_the_whole_app(command: str):
    alone = CliRunner().invoke(cli.for_argv([command]), [command, "--help"], terminal_width=200)
    whole = CliRunner().invoke(cli.app, [command, "--help"], terminal_width=200)
    assert alone.exit_code == whole.exit_code == 0, alone.output
    assert alone.output == whole.output
    assert f"llms-benchmark {command}" in alone.output or f"{command} [OPTIONS]" in alone.output


def test_a_command_line_imports_only_its_command():
    """A `rule` call never imports the launch's modules (the point of building one verb)."""
    code = ("import sys; from harness.cli import for_argv; for_argv(['rule']); "
            "print(sorted(m for m in sys.modules if m.startswith('harness.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "harness.cli.rule" in out and "harness.cli.launch" not in out and "harness.cli.render" not in out, out


def test_no_command_or_an_unknown_one_gets_the_whole_app():
    assert set(get_command(cli.for_argv([])).commands) == set(get_command(cli.app).commands)
    result = CliRunner().invoke(cli.for_argv(["lanch"]), ["lanch"])
    assert result.exit_code == 2 and "No such command 'lanch'" in result.output


def test_help_lists_every_command_in_its_panel_the_main_job_first():
    """Issue 63: `launch` was 21st of 24. Each command sits in one panel (a new command not put
    in PANELS would fall into an unnamed one), in the order PANELS gives, `launch` first."""
    group = get_command(cli.app)
    assert set(cli.ORDER) == set(group.commands) and len(cli.ORDER) == len(set(cli.ORDER))
    assert group.list_commands(None) == cli.ORDER and cli.ORDER[0] == "launch"
    out = CliRunner().invoke(cli.app, ["--help"], terminal_width=120).output
    panels = [line for line in out.splitlines() if line.startswith("╭─")]
    assert [p.strip("╭─╮ ") for p in panels] == ["Options", *cli.PANELS]
    at = {name: out.index(f"│ {name} ") for name in cli.ORDER}
    assert sorted(at, key=at.get) == cli.ORDER
