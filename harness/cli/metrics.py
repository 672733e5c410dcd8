"""`llms-benchmark metrics`: read the server's /metrics."""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, emit, out, user_errors
from harness.errors import UserError


@user_errors
def metrics_cmd(
    url: Annotated[str | None, typer.Argument(help="The server's base URL (or its /metrics URL).")] = None,
    base_url: Annotated[str, typer.Option("--base-url", help="The server's base URL (instead of URL).")] = "",
    watch: Annotated[float, typer.Option(help="Read every N seconds, one line each (0: once).")] = 0,
    count: Annotated[int, typer.Option(help="With --watch: stop after this many lines (0: until Ctrl-C).")] = 0,
    api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Read the server's /metrics: running, waiting, KV usage, preemptions, prefix cache, tokens (vLLM, llama.cpp)."""
    from harness.load.metrics import line_text, read_once, timeline
    from harness.probe import api_key_from_env

    target = base_url or url
    if not target or (url and base_url):
        raise UserError("give the server's URL once: as URL or as --base-url", field="URL",
                        fix="llms-benchmark metrics http://127.0.0.1:8000")
    if not math.isfinite(watch) or watch < 0:
        raise UserError(f"--watch is the seconds between two readings, not {watch:g}", field="--watch",
                        fix="give --watch 5 to read every 5 seconds, or leave it out (0) to read once")
    if count < 0:
        raise UserError(f"--count is how many lines to print, not {count}", field="--count",
                        fix="give --count 10 to stop after 10 lines, or leave it out (0) to read until Ctrl-C")
    api_key = api_key_from_env(api_key_env or None)
    if not watch:
        doc = read_once(target, api_key=api_key)
        table = Table("figure", "value", title=f"{doc['url']} ({doc['server']})")
        for key, value in doc["figures"].items():
            table.add_row(key, "-" if value is None else f"{value:g}")
        emit(doc, as_json, table)
        return
    try:
        for line in timeline(target, watch, count or None, api_key=api_key):
            if as_json:
                print(json.dumps(line), flush=True)
            else:
                out.print(line_text(line), highlight=False, markup=False)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics_cmd)
