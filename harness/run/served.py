"""Serve `<environment> <preset>` for the length of a load run, and always destroy it.

The unit's life is `harness.run.units`' own: in the ledger before it is created, out of it
only once destroy verified it gone; SIGINT and SIGTERM unwind to the destroy, and a
second signal cannot interrupt it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.records.paths import RunPaths
from harness.run.preflight import Preflight, run_preflight
from harness.stacks.base import Unit
from harness.run.units import UnitLife, claim, destroy_leftovers, lifetime

Say = Callable[[str], None]


def preflight(root: Path, environment: str, preset: str, say: Say) -> Preflight:
    """Everything checked before anything bills (no opencode needed for a load run)."""
    destroy_leftovers(root, say)
    pf = run_preflight(root, environment, preset, None, need_opencode=False)
    claim(root, pf)
    return pf


@contextlib.contextmanager
def served(root: Path, pf: Preflight, say: Say, log_dest: Callable[[], Path | None]) -> Iterator[tuple[Unit, str | None]]:
    """(ready unit, its API key); destroyed on the way out, whatever happens inside.

    `log_dest()` is asked at the end where the unit's log should be kept (None: dropped).
    """
    scratch = RunPaths(Path(tempfile.mkdtemp(prefix="llms-benchmark-load-")))
    life = UnitLife(root, say, log_path=scratch.unit_log, destroy_attempts=1)
    try:
        with lifetime(life):
            unit = life.serve(pf)
            say(f"serving {unit.name} at {unit.base_url} (billing until destroyed); waiting until it answers")
            yield unit, life.wait_ready()
    finally:
        dest = log_dest()
        if dest is not None and scratch.unit_log.is_file():
            kept = RunPaths(dest)
            kept.dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(scratch.unit_log, kept.unit_log)
        shutil.rmtree(scratch.dir, ignore_errors=True)
