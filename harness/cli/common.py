"""What every verb shares: the consoles, the project root, `--json`, the exit codes (one
table, EXIT_CODES: the README's is generated from it), and the one way a user error becomes a
message and an exit code.
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

from harness.run.clean_exit import clean_exit

# (code, what it means, which commands): every command follows this table.
EXIT_CODES: tuple[tuple[str, str, str], ...] = (
    ("0", "done: a row was produced, or the command did what it says", "every command"),
    ("1", "a void run (no row; its reason recorded), or a check that found a disagreement or a gap",
     "`launch`, `wait` (void); `score check`, `mission check`; `classroom` (no request answered), `load` "
     "(a level with failures, or cancelled); `fitness run` (WARN)"),
    ("2", "bad input or a preflight refusal: one message naming the file, the field and the fix; nothing "
     "served, nothing lost (`render` leaves out a record it cannot read, renders the rest, names it)",
     "every `llms-benchmark` command; `launch`/`wait`: refused at preflight or smoke; `fitness run`: a FAIL"),
    ("3", "a harness fault, or a unit that failed to serve (what was served is destroyed)",
     "`launch`, `wait`, `serve`, `load`; `fitness`: any pipeline error, a usage error included (never 2, "
     "which the seed reads as FAIL)"),
    ("124", "still running after `--timeout` (the run goes on; wait again)", "`wait`"),
    ("128+N", "interrupted by signal N (what was served is destroyed first)", "every command that serves"),
)

out = Console()
err = Console(stderr=True)

def comma_list(values: list[str] | None) -> list[str] | None:
    """The callback of every list option: the flag may be given again, and one value may hold
    several items comma-separated (`--concurrency 1,8,16`, as the README writes it); the items
    stripped, empty ones dropped."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


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


# A user mistake is one clear message and exit 2 — never a traceback (harness/run/clean_exit.py).
user_errors = clean_exit(err)


# The command that writes the agent trace `load-agents` and `launch --capacity-trace` replay.
MAKE_TRACE = "`llms-benchmark load-trace RUN_FOLDER --out NAME.trace.jsonl` writes one from a run's wire log"


def require_trace_file(path: Path, field: str) -> None:
    """A trace file named on the command line exists, refused (naming the command that writes
    one) before anything is served or measured."""
    try:
        found = Path(path).is_file()
    except OSError:  # a name the OS refuses (too long, ...)
        found = False
    if not found:
        from harness.errors import UserError

        raise UserError(f"no trace file at {path}", file=path, field=field,
                        fix=f"give a *.trace.jsonl: {MAKE_TRACE}")


def emit(data: dict, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        out.print_json(json.dumps(data, default=str))
    elif table is not None:
        out.print(table)
