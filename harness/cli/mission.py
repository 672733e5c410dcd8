"""`llms-benchmark mission`: missions: check that one works end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, out, project_root, user_errors


app = typer.Typer(no_args_is_help=True, help="Missions: check that one works end to end.")


@app.command("check")
@user_errors
def mission_check(name: str,
                  duration: Annotated[float, typer.Option(help="Scenario length in seconds.")] = 120,
                  as_json: JsonOpt = False) -> None:
    """Start what the mission runs, drive its scenario, run its key's self-test; exit 0 only if all is there."""
    import tempfile

    from harness.mission import load_mission, prepare_workspace
    from harness.mission_services import check_mission

    mission = load_mission(project_root(), name)
    with tempfile.TemporaryDirectory(prefix=f"llms-benchmark-check-{name}-") as tmp:
        workspace = prepare_workspace(mission, Path(tmp) / "workspace")
        result = check_mission(mission, workspace, Path(tmp), duration)
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        table = Table("signal", *next(iter(result["signals"].values()), {}).keys(), title="rows per service")
        for signal_name, per in result["signals"].items():
            table.add_row(signal_name, *(str(n) for n in per.values()))
        out.print(table)
        defects = Table("defect", "kind", "found", "evidence", title="key self-test")
        for d in result["defects"]:
            defects.add_row(d["id"], d["kind"], "yes" if d["found"] else "[red]NO[/red]",
                            "; ".join(f"{c['expect']} (got {c['got']})" for c in d["checks"]))
        out.print(defects)
        found = sum(d["found"] for d in result["defects"])
        out.print(f"{found}/{len(result['defects'])} defects found; workspace "
                  + ("clean" if not result["workspace_hits"] else f"names the key: {result['workspace_hits'][:5]}"))
    raise typer.Exit(0 if result["ok"] else 1)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="mission")
