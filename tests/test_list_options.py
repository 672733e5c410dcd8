"""Issue 49: one callback for every list option (the flag repeated, or a comma-separated value,
or both), and the classroom glob's {a,b} alternatives bounded (a pattern the model wrote)."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from harness.cli.common import comma_list
from harness.load.classroom_project import MAX_BRACE_ALTERNATIVES, glob_matches


def test_a_list_option_takes_repeats_and_commas_alike():
    app = typer.Typer()

    @app.command()
    def cmd(levels: Annotated[list[str], typer.Option(callback=comma_list)] = ["1,8"]):  # noqa: B006
        typer.echo(" ".join(levels))

    runner = CliRunner()
    assert runner.invoke(app, []).output.strip() == "1 8"
    assert runner.invoke(app, ["--levels", "2, 4", "--levels", "16"]).output.strip() == "2 4 16"
    assert runner.invoke(app, ["--levels", ",,"]).output.strip() == ""
    assert comma_list(None) is None


def test_glob_alternatives_are_bounded():
    assert glob_matches("{a,b}{c,d}.py", "bd.py") and not glob_matches("{a,b}{c,d}.py", "ab.py")
    with pytest.raises(ValueError, match="alternatives"):
        glob_matches("{a,b}" * 9 + ".py", "a.py")  # 2**9 = 512 > MAX_BRACE_ALTERNATIVES
    assert MAX_BRACE_ALTERNATIVES < 2 ** 9
