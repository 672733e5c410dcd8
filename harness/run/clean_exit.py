"""The one way a command ends on a known failure: a message on stderr and an exit code,
never a traceback. Shared by the main CLI and by sub-apps that live in their own packages
(fitness), which import this module rather than `harness.cli`.

A user mistake exits with its own code (2 unless the error says otherwise, or the code the
caller fixes: fitness pipelines exit 3 on any failure), a unit that failed to serve 3, a
signal 128+N (what was served is destroyed by then).
"""

from __future__ import annotations

import functools

import typer
from rich.console import Console
from rich.markup import escape

from harness.errors import Interrupted, StackError, UserError

UNIT_FAILURE = 3


def clean_exit(err: Console, *, user_exit: int | None = None, unit_exit: int = UNIT_FAILURE):
    """A decorator for typer commands: known failures become one message and an exit code."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except UserError as exc:
                err.print(f"[bold red]error:[/bold red] {escape(exc.render())}", highlight=False)
                raise typer.Exit(exc.exit_code if user_exit is None else user_exit) from None
            except StackError as exc:  # the unit failed to start or answer (already destroyed)
                err.print(f"[bold red]unit failure:[/bold red] {escape(str(exc))}", highlight=False)
                raise typer.Exit(unit_exit) from None
            except Interrupted as exc:  # SIGINT/SIGTERM: whatever was served is destroyed by now
                err.print(f"[bold red]{escape(str(exc))}[/bold red]", highlight=False)
                raise typer.Exit(128 + exc.signum) from None

        return wrapper

    return decorate
