"""The real launch with one witness: as the collect stage begins (wherever the launch puts it),
it asks the unit's server for /v1/models, reads the units ledger and looks for the agent's
report in the run folder (copied out by the collect itself), and writes what it found
to $COLLECT_PROBE_OUT; then the real collect runs. Run as `python collect_probe.py launch local ...`.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

import harness.launcher.launch as launch  # noqa: E402
from harness.stages import collect as collect_stage  # noqa: E402


def _witness(rec, ctx) -> None:
    unit = ctx.life.unit
    try:
        answered = httpx.get(f"{unit.base_url}/v1/models", timeout=3.0).status_code
    except httpx.HTTPError as exc:
        answered = type(exc).__name__
    ledger = ctx.root / ".vot" / "run" / "units.json"
    held = json.loads(ledger.read_text()) if ledger.is_file() else {}
    Path(os.environ["COLLECT_PROBE_OUT"]).write_text(json.dumps({
        "server": answered, "ledger": sorted(held), "destroyed_at": str(ctx.life.destroyed_at),
        "pid_alive": _alive(unit.pid), "report_copied": ctx.paths.report.exists()}))
    collect_stage.collect(rec, ctx)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


launch.STAGES = tuple(replace(s, run=_witness) if s.name == "collect" else s for s in launch.STAGES)
if hasattr(launch, "AFTER_DESTROY"):
    launch.AFTER_DESTROY = tuple(replace(s, run=_witness) if s.name == "collect" else s
                                 for s in launch.AFTER_DESTROY)

if __name__ == "__main__":
    from harness.cli import main

    sys.argv[0] = "llms-benchmark"
    main()
