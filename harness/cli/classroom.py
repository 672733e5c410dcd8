"""`llms-benchmark classroom`: simulate a class of students against a real endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import JsonOpt, emit, out, project_root, say, user_errors


@user_errors
def classroom(
    url: Annotated[str | None, typer.Argument(
        help="The OpenAI-compatible server, e.g. http://127.0.0.1:8000 (or --base-url).", show_default=False)] = None,
    model: Annotated[str, typer.Option(
        "--model", help="Served model name (GET /v1/models must list it; default: the first it lists).")] = "",
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="The server's base URL (the seed's flag; the same as the argument).", show_default=False)] = None,
    users: Annotated[int, typer.Option(help="Simulated students.")] = 40,
    scenario: Annotated[str, typer.Option(help="Lab project: java (Maven, JUnit), python (pytest), or mixed "
                                               "(alternating).")] = "java",
    duration: Annotated[float, typer.Option(help="Real seconds during which students start new requests.")] = 900,
    grace: Annotated[float, typer.Option(help="Real seconds after --duration for requests under way.")] = 300,
    ramp_up: Annotated[float, typer.Option(help="Students start within this many simulated seconds.")] = 120,
    think_min: Annotated[float, typer.Option(help="Shortest pause between requests (simulated s).")] = 20,
    think_max: Annotated[float, typer.Option(help="Longest pause between requests (simulated s).")] = 90,
    tool_min: Annotated[float, typer.Option(help="Shortest build/test run (simulated s).")] = 3,
    tool_max: Annotated[float, typer.Option(help="Longest build/test run (simulated s).")] = 12,
    test_fail_rate: Annotated[float, typer.Option(help="Chance that a session's first test run fails.")] = 0.3,
    max_turns: Annotated[int, typer.Option(help="Requests per student: the exercise + follow-ups.")] = 4,
    max_steps: Annotated[int, typer.Option(help="Model calls per request, tool steps included.")] = 40,
    max_output: Annotated[int, typer.Option(help="max_tokens per call (opencode limit.output).")] = 8192,
    context_limit: Annotated[int, typer.Option(help="Client context limit (opencode limit.context).")] = 65536,
    max_retries: Annotated[int, typer.Option(help="Retries per call after HTTP 429 or 503.")] = 5,
    keys_file: Annotated[Path | None, typer.Option(
        "--api-keys-file", "--keys-file", help="API keys, one a line or user_id,api_key (one per student).")] = None,
    api_key_env: Annotated[str, typer.Option(help="Env var holding one key for all (without --api-keys-file).")] = "",
    cacert: Annotated[Path | None, typer.Option(
        "--cacert", help="PEM bundle of the private CA that signed the server's certificate.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Accepted for the seed's command line: nothing is ever asked.")] = False,
    prompt_file: Annotated[Path | None, typer.Option(help="Captured opencode {system, tools} JSON.")] = None,
    title: Annotated[bool, typer.Option("--title/--no-title", help="Send opencode's title request.")] = True,
    metrics: Annotated[bool, typer.Option("--metrics/--no-metrics", help="Sample the server's /metrics.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 20260929,
    time_scale: Annotated[float, typer.Option(help="Multiplier for simulated waits (1.0 = real seconds).")] = 1.0,
    timeout: Annotated[float, typer.Option(help="Per-read idle timeout of a request (s).")] = 600,
    out_dir: Annotated[Path | None, typer.Option(help="Parent of classroom-<UTC>/ (default ./bench-results).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a class of students, each with a coding agent on a small lab project, against a real endpoint."""
    from harness.load.classroom import run_classroom
    from harness.load.classroom_config import ClassroomConfig
    from harness.load.classroom_report import summary_table

    from harness.errors import UserError

    if url and base_url and url != base_url:
        raise UserError(f"two base URLs: {url!r} and --base-url {base_url!r}", field="--base-url",
                        fix="give the server's URL once, as the argument or with --base-url")
    if not (url or base_url):
        raise UserError("no server URL", field="--base-url", fix="give it: --base-url http://127.0.0.1:8000")
    del yes  # never prompts: --yes is the seed's, accepted as it is
    cfg = ClassroomConfig(
        base_url=url or base_url, model=model, cacert=cacert, users=users, scenario=scenario, duration_s=duration, grace_s=grace,
        ramp_up_s=ramp_up, think_s=(think_min, think_max), tool_s=(tool_min, tool_max), test_fail_rate=test_fail_rate,
        max_turns=max_turns, max_steps=max_steps, max_output=max_output, context_limit=context_limit,
        max_retries=max_retries, keys_file=keys_file, api_key_env=api_key_env or None, prompt_file=prompt_file,
        title=title, metrics=metrics, seed=seed, time_scale=time_scale, read_timeout_s=timeout,
        out_dir=out_dir or project_root() / "bench-results")
    result = run_classroom(cfg, say)
    if as_json:
        emit({**result.summary, "folder": str(result.folder)}, True)
    else:
        out.print(summary_table(result.summary))
        out.print(f"results: {result.folder}", highlight=False)
    raise typer.Exit(0 if result.summary["client"]["requests_ok"] else 1)


def register(app: typer.Typer) -> None:
    app.command()(classroom)
