"""What every verb shares: the consoles, the project root, `--json`, and the one way a
user error becomes a message and an exit code.

Exit codes: 0 ok, 1 a void run, 2 a preflight or input error (nothing served),
3 a harness fault (the unit still destroyed); 128+N after signal N (what was served is destroyed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.clean_exit import clean_exit

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


# A user mistake is one clear message and exit 2 — never a traceback (harness/clean_exit.py).
user_errors = clean_exit(err)


def emit(data: dict, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        out.print_json(json.dumps(data, default=str))
    elif table is not None:
        out.print(table)
