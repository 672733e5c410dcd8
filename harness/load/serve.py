"""Serve `<environment> <preset>` for the length of a load run, and always destroy it.

The unit goes through the ledger exactly as a launch's does: written before it is
created, removed only after destroy verified it gone; SIGINT and SIGTERM unwind to
the `finally` that destroys, and a second signal cannot interrupt the destroy.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.launch import _raise_interrupted, destroy_leftovers, destroy_unit, on_signals, plan_unit, \
    refuse_if_served, start_unit
from harness.preflight import Preflight, run_preflight
from harness.probe import unit_api_key
from harness.stacks.base import Unit
from harness.stacks.ledger import Ledger
from harness.unitlog import UnitLogCollector, wait_ready

Say = Callable[[str], None]


def preflight(root: Path, environment: str, preset: str, say: Say) -> Preflight:
    """Everything checked before anything bills (no opencode needed for a load run)."""
    destroy_leftovers(root, say)
    pf = run_preflight(root, environment, preset, None, need_opencode=False)
    refuse_if_served(root, pf.env.name, f"vot-{pf.preset.name}")
    return pf


@contextlib.contextmanager
def served(root: Path, pf: Preflight, say: Say, log_dest: Callable[[], Path | None]) -> Iterator[tuple[Unit, str | None]]:
    """(ready unit, its API key); destroyed on the way out, whatever happens inside.

    `log_dest()` is asked at the end where the unit's log should be kept (None: dropped).
    """
    ledger = Ledger(root)
    unit = plan_unit(pf, ledger, owner=True)
    scratch = Path(tempfile.mkdtemp(prefix="llms-benchmark-load-"))
    collector: UnitLogCollector | None = None
    try:
        with on_signals(_raise_interrupted):
            unit = start_unit(pf, unit, ledger)
            collector = UnitLogCollector(pf.stack, unit, scratch / "unit.log")
            collector.start()
            say(f"serving {unit.name} at {unit.base_url} (billing until destroyed); waiting until it answers")
            api_key = unit_api_key(pf.stack, unit)
            wait_ready(unit, pf.stack.ready_timeout_s, collector, api_key=api_key)
            yield unit, api_key
    finally:
        with on_signals(lambda signum, _f: say(f"{signal.Signals(signum).name} received: finishing the destroy first")):
            if collector is not None:
                try:
                    collector.stop()
                except Exception as exc:  # never let log collection stand between us and destroy
                    say(f"unit log collection failed: {exc}")
            try:
                existed = destroy_unit(pf.stack, unit, ledger)
                say(f"destroyed {unit.name}" + ("" if existed else " (it had already exited)"))
            except Exception as exc:
                say(f"DESTROY FAILED for {unit.name}: {exc}; run `llms-benchmark destroy {pf.env.name} "
                    f"{pf.preset.name}`")
                raise
            finally:
                dest = log_dest()
                if dest is not None and (scratch / "unit.log").is_file():
                    dest.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(scratch / "unit.log", dest / "unit.log")
                shutil.rmtree(scratch, ignore_errors=True)
