"""`llms-benchmark preflight`: check everything that must hold before anything bills."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, emit, project_root, user_errors
from harness.mission import DEFAULT_MISSION


@user_errors
def preflight(environment: str, preset: str,
              mission: Annotated[str, typer.Option(help="Mission whose minimum context is checked.")] = DEFAULT_MISSION,
              as_json: JsonOpt = False) -> None:
    """Check everything that must hold before anything bills."""
    from harness.run.preflight import run_preflight

    pf = run_preflight(project_root(), environment, preset, mission)
    data = {"environment": pf.env.name, "stack": pf.env.stack, "preset": pf.preset.name, "model": pf.preset.model,
            "served_name": pf.preset.served_name, "max_model_len": pf.preset.max_model_len, "gpu": pf.gpu.label,
            "mission": mission, "opencode": pf.opencode_version, "ok": True}
    table = Table("check", "value", title="preflight ok")
    for key, value in data.items():
        table.add_row(key, str(value))
    emit(data, as_json, table)


def register(app: typer.Typer) -> None:
    app.command()(preflight)
