"""`llms-benchmark units`: a unit by hand: serve it, destroy it, list what the ledger holds."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.table import Table

from harness.cli.common import JsonOpt, emit, err, out, project_root, say, user_errors


@user_errors
def serve(environment: str, preset: str, as_json: JsonOpt = False) -> None:
    """Serve one unit by hand (it bills until `destroy`)."""
    from harness.run.preflight import run_preflight
    from harness.run.units import UnitLife, claim, destroy_leftovers, lifetime

    from harness.launcher.pending import sweep_disks

    root = project_root()
    destroy_leftovers(root, say)
    sweep_disks(say)  # a dead launch's agent disks (a pending collect's folders copied back)
    pf = run_preflight(root, environment, preset, None, need_opencode=False)
    claim(root, pf)
    life = UnitLife(root, say, log_path=Path(os.devnull), owner=False)
    try:
        with lifetime(life, keep=True):  # destroyed only when it never became ready
            unit = life.serve(pf)
            say(f"serving {unit.name} at {unit.base_url}; waiting until it answers")
            limit, started = pf.stack.ready_timeout_s, time.monotonic()
            with err.status(f"waiting for {unit.name} (up to {limit / 60:.0f} min)") as status:
                life.wait_ready(on_wait=lambda: status.update(
                    f"waiting for {unit.name} to list {unit.served_name}: {time.monotonic() - started:.0f}s of {limit:.0f}s"))
    except BaseException:
        if life.unit is not None and life.destroy_error is None:
            unit = life.unit
            say(f"{unit.name} destroyed; the last lines of its log ({unit.log_path}):")
            tail = Path(unit.log_path).read_text(errors="replace").splitlines()[-20:] if unit.log_path else []
            err.print("\n".join(tail), highlight=False, markup=False)
        raise
    data = {"unit": unit.name, "base_url": unit.base_url, "served_name": unit.served_name, "log": unit.log_path}
    table = Table("unit", "base URL", "served name", "log", title="ready — billing until destroyed")
    table.add_row(unit.name, unit.base_url, unit.served_name, unit.log_path or "")
    emit(data, as_json, table)
    say(f"destroy with: llms-benchmark destroy {environment} {preset}")


@user_errors
def destroy(environment: str, preset: str, as_json: JsonOpt = False) -> None:
    """Destroy unit vot-<preset> on an environment (a missing unit is reported, not an error)."""
    from harness.run.units import destroy_unit
    from harness.stacks.ledger import Ledger
    from harness.stacks.registry import get_stack
    from harness.vot.environment import load_environment

    root = project_root()
    env = load_environment(root, environment)
    ledger = Ledger(root)
    unit = ledger.get(env.name, f"vot-{preset}")
    if unit is None:
        message = f"unit vot-{preset} does not exist on {env.name} (nothing in the ledger)"
        facts = {"unit": f"vot-{preset}", "environment": env.name, "in_ledger": False, "destroyed": False}
    else:
        existed = destroy_unit(get_stack(unit.stack, root), unit, ledger)
        message = f"destroyed {unit.name} on {env.name}" + ("" if existed else " (it had already exited)")
        facts = {"unit": unit.name, "environment": env.name, "in_ledger": True, "destroyed": True,
                 "was_running": existed}
    if as_json:
        emit(facts, True)
    else:
        out.print(message)


@user_errors
def units(as_json: JsonOpt = False) -> None:
    """List the units in the ledger (served and not yet destroyed)."""
    from harness.stacks.ledger import Ledger

    listed = Ledger(project_root()).all()
    table = Table("environment", "unit", "stack", "base URL", "pid", "owner", title="units in the ledger")
    for u in listed:
        table.add_row(u.environment, u.name, u.stack, u.base_url, str(u.pid or ""),
                      str(u.extra.get("owner_pid") or "by hand"))
    emit({"units": [u.__dict__ for u in listed]}, as_json, table)
    if not as_json and not listed:
        out.print("no units in the ledger")


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(destroy)
    app.command()(units)
