"""The Stack protocol, the Unit it serves, and the GPU cell it reports.

A stack knows one kind of home for a model server (a local process, a container,
a cloud app). The launch pipeline only ever talks to this protocol, so adding a
home never touches the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


@dataclass(frozen=True)
class GpuCell:
    """What the results table's GPU column says, plus what GPU-hours count."""

    label: str  # e.g. "A100 80 GB", "CPU (2 cores)", "replay (scripted, no GPU)"
    gpus: int  # GPUs billed while the unit lives (0 for CPU and replay)


@dataclass
class Unit:
    """One served preset: `vot-<preset>` on one environment."""

    name: str
    stack: str
    environment: str
    preset: str
    base_url: str
    served_name: str
    max_model_len: int | None
    # Name of the environment variable holding the API key, never its value.
    api_key_env: str | None = None
    pid: int | None = None
    log_path: str | None = None
    # Stack-specific facts destroy needs (container id, resource id, marker, ...).
    extra: dict = field(default_factory=dict)
    scripted: bool = False  # a replay trajectory, not a model


def unit_name(preset: str) -> str:
    return f"vot-{preset}"


def file_logs(unit: Unit, offset: int) -> tuple[str, int]:
    """`Stack.logs` for a unit whose log is a local file (`unit.log_path`: a local process's
    output, or what azure's log follower writes): the text since `offset` and the new offset;
    nothing yet while the file does not exist."""
    if not unit.log_path:
        return "", offset
    try:
        with open(unit.log_path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return "", offset
    return data.decode("utf-8", "replace"), offset + len(data)


class Stack(Protocol):
    """preflight → GPU cell, serve → unit, logs, ready, destroy.

    Optional: `api_key(unit) -> str | None` (see `KeyHolder`), for a stack that holds the
    unit's API key itself (azure: the app's secret) instead of naming an environment
    variable in `Unit.api_key_env`. Callers look it up with getattr
    (harness.probe.unit_api_key); a stack without it is read through `api_key_env`.
    Optional: `check_mission(preset, mission)`, for a stack whose model is a script (replay):
    run_preflight calls it to refuse a mission the script cannot play, before serving.
    """

    name: str

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        """Everything checked before billing. Raises PreflightError naming the fix."""

    ready_timeout_s: float

    def plan(self, env: Environment, preset: ResolvedPreset) -> Unit:
        """Decide the unit's name, address and identity, with no side effect, so the
        caller can write it to the ledger before anything is created."""

    def serve(self, unit: Unit, env: Environment, preset: ResolvedPreset) -> Unit:
        """Start the unit (it bills from here on) and return it with what destroy needs."""

    def logs(self, unit: Unit, offset: int) -> tuple[str, int]:
        """Log text written since `offset` and the new offset (collected from creation)."""

    def alive(self, unit: Unit) -> bool:
        """False once the unit has died on its own (crash, exit)."""

    def destroy(self, unit: Unit) -> bool:
        """Remove the unit and verify it is gone. Idempotent: False when it did not exist."""

    def fatal_patterns(self) -> tuple[str, ...]:
        """Log lines that mean the start failed for good: destroy at once."""


class KeyHolder(Protocol):
    """The optional part of `Stack`: a stack that holds its units' API keys."""

    def api_key(self, unit: Unit) -> str | None:
        """The key a client sends to `unit`, read when it is needed and held in memory
        only (never written to the ledger, the record or a file); None: no key."""
