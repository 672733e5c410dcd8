"""The unit ledger: every unit is written here before it is created and removed
only after its destroy is verified, so a killed launch never hides a billing unit.

One JSON file under `.vot/run/`, replaced atomically and guarded by an flock so
two launches on one machine cannot lose each other's entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

from harness.atomic import write_atomic
from harness.stacks.base import Unit


class Ledger:
    def __init__(self, root: Path) -> None:
        self.dir = root / ".vot" / "run"
        self.path = self.dir / "units.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "units.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            units = self._read()
            before = json.dumps(units, sort_keys=True)
            yield units
            if json.dumps(units, sort_keys=True) != before:
                self._write(units)

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError:
            # A torn file cannot happen (atomic replace), but never lose units silently:
            # keep the bad file aside and start a fresh ledger.
            self.path.rename(self.path.with_suffix(".corrupt"))
            return {}

    def _write(self, units: dict[str, dict]) -> None:
        write_atomic(self.path, json.dumps(units, indent=2, sort_keys=True))

    @staticmethod
    def key(environment: str, name: str) -> str:
        return f"{environment}/{name}"

    def add(self, unit: Unit) -> None:
        with self._locked() as units:
            units[self.key(unit.environment, unit.name)] = dataclasses.asdict(unit)

    def update(self, unit: Unit) -> None:
        self.add(unit)

    def remove(self, unit: Unit) -> None:
        with self._locked() as units:
            units.pop(self.key(unit.environment, unit.name), None)

    def get(self, environment: str, name: str) -> Unit | None:
        with self._locked() as units:
            raw = units.get(self.key(environment, name))
        return Unit(**raw) if raw else None

    def all(self) -> list[Unit]:
        with self._locked() as units:
            return [Unit(**raw) for raw in units.values()]
