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

from pydantic import TypeAdapter, ValidationError

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.paths import ProjectPaths
from harness.stacks.base import Unit

_UNIT = TypeAdapter(Unit)


class Ledger:
    def __init__(self, root: Path) -> None:
        self.dir = ProjectPaths(root).unit_run_dir
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
            units = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            units = None
        if not isinstance(units, dict):
            # A torn file cannot happen (atomic replace), but never lose units silently:
            # keep the bad file aside and start a fresh ledger.
            self.path.rename(self.path.with_suffix(".corrupt"))
            return {}
        return units

    def _unit(self, key: str, raw: object) -> Unit:
        """One entry as a Unit; an entry edited by hand into something else is one UserError."""
        try:
            return _UNIT.validate_python(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserError(f"entry {key!r} is not a unit: {where + ': ' if where else ''}{first['msg']}",
                            file=self.path, field=key,
                            fix="restore the entry as the harness wrote it, or destroy that unit by hand and "
                                "remove the entry") from None

    def _write(self, units: dict[str, dict]) -> None:
        write_atomic(self.path, json.dumps(units, indent=2, sort_keys=True))

    @staticmethod
    def key(environment: str, name: str) -> str:
        return f"{environment}/{name}"

    def add(self, unit: Unit, *, exclusive: bool = False) -> None:
        """Write the unit's entry. `exclusive`: refuse when the entry exists, decided under
        the lock, so two launches of one preset racing each other never both serve it."""
        with self._locked() as units:
            key = self.key(unit.environment, unit.name)
            if exclusive and key in units:
                where = units[key].get("base_url") if isinstance(units[key], dict) else "an entry edited by hand"
                raise UserError(
                    f"{unit.name} is already served on {unit.environment} ({where}); "
                    "never a second unit", file=self.path,
                    fix=f"destroy it first: llms-benchmark destroy {unit.environment} {unit.preset}")
            units[key] = dataclasses.asdict(unit)

    def update(self, unit: Unit) -> None:
        self.add(unit)

    def remove(self, unit: Unit) -> None:
        with self._locked() as units:
            units.pop(self.key(unit.environment, unit.name), None)

    def get(self, environment: str, name: str) -> Unit | None:
        with self._locked() as units:
            key = self.key(environment, name)
            raw = units.get(key)
        return self._unit(key, raw) if raw is not None else None

    def all(self) -> list[Unit]:
        with self._locked() as units:
            return [self._unit(key, raw) for key, raw in units.items()]
