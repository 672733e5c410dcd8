"""What every verb shares: the consoles, the project root, `--json`, and the one way a
user error becomes a message and an exit code.

Exit codes: 0 ok, 1 a void run, 2 a preflight or input error (nothing served),
3 a harness fault (the unit still destroyed); 128+N after signal N (what was served is destroyed).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.errors import Interrupted, StackError, UserError

out = Console()
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
PageOpt = Annotated[Path | None, typer.Option("--page", help="The results page (default .llms-benchmark/README.md).")]


def project_root() -> Path:
    """LLMS_BENCHMARK_ROOT, else the nearest folder upwards holding `.vot/`, else the cwd."""
    if os.environ.get("LLMS_BENCHMARK_ROOT"):
        return Path(os.environ["LLMS_BENCHMARK_ROOT"]).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / ".vot").is_dir():
            return folder
    return here


def say(message: str) -> None:
    err.print(f"[dim]llms-benchmark[/dim] {escape(message)}", highlight=False)


def user_errors(fn):
    """A user mistake is one clear message and exit 2 — never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            err.print(f"[bold red]error:[/bold red] {escape(exc.render())}", highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except StackError as exc:  # the unit failed to start or answer (already destroyed)
            err.print(f"[bold red]unit failure:[/bold red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(3) from None
        except Interrupted as exc:  # SIGINT/SIGTERM: whatever was served is destroyed by now
            err.print(f"[bold red]{escape(str(exc))}[/bold red]", highlight=False)
            raise typer.Exit(128 + exc.signum) from None

    return wrapper


def emit(data: dict, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        out.print_json(json.dumps(data, default=str))
    elif table is not None:
        out.print(table)
