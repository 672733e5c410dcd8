"""`llms-benchmark probe`: measure decode and prefill speed of a served model."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, emit, user_errors
from harness.errors import UserError


@user_errors
def probe(base_url: str, model: Annotated[str, typer.Option("--model", help="Served model name.")],
          max_model_len: Annotated[int, typer.Option(help="The server's context length.")] = 0,
          long_tokens: Annotated[int, typer.Option(help="Target size of the long-context prompt.")] = 82_000,
          api_key_env: Annotated[str, typer.Option(help="Name of the env var holding the API key.")] = "",
          as_json: JsonOpt = False) -> None:
    """Measure decode (short and long context) and prefill speed of a served model."""
    import httpx

    from harness.probe import api_key_from_env, run_probe

    try:
        result = run_probe(base_url, model, max_model_len=max_model_len or None,
                           api_key=api_key_from_env(api_key_env or None), long_target=long_tokens)
    except httpx.HTTPError as exc:
        raise UserError(f"the server at {base_url} did not answer the probe: {exc}",
                        fix="check the base URL and the --model name (GET /v1/models lists it)") from None
    table = Table("figure", "value", title=f"probe of {model}")
    for key, value in result.model_dump().items():
        table.add_row(key, str(value))
    emit(result.model_dump(), as_json, table)


def register(app: typer.Typer) -> None:
    app.command()(probe)
