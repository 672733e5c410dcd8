"""The phase registry: each phase is one module with `run(ctx) -> (metrics, details)`;
it raises `Skip(reason)` when it cannot apply, and `PhaseError` when it failed to measure.
An optional `check_offline(cfg)` is what `--dry-run` runs (config and data, no network).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from harness.fitness.config import FitnessConfig
from harness.fitness.endpoint import Endpoint, PhaseError


class Skip(Exception):
    """The phase does not apply here; the reason goes into the report."""


@dataclass
class Ctx:
    endpoint: Endpoint
    cfg: FitnessConfig
    out_dir: Path
    say: Callable[[str], None]
    reverse: bool = False  # the second pass of --repeats 2 runs its items in reverse order
    cancelled: Callable[[], bool] = lambda: False
    # the cross-judge's schedule (the seed's: the first run, then every n-th), decided from the history
    cross_due: bool = True
    cross_why: str = ""
    # the telemetry phase's VRAM reading (GiB occupied before any load; None: not exposed)
    vram: dict[str, Any] = field(default_factory=dict)


@dataclass
class PhaseResult:
    name: str
    # not_run: never started (an earlier failure, a cancel); cancelled: interrupted while running
    status: Literal["ran", "skipped", "error", "not_run", "cancelled"]
    reason: str | None = None
    wall_s: float = 0.0
    metrics: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    repeat: int = 1
    requests: dict[str, Any] = field(default_factory=dict)  # retries and empty answers (retry.Tally.doc)


def modules() -> dict[str, ModuleType]:
    from harness.fitness.phases import capability, capacity, judge, kl, telemetry, throughput, tooluse, warmup

    return {"telemetry": telemetry, "warmup": warmup, "tooluse": tooluse, "throughput": throughput,
            "capacity": capacity, "capability": capability, "kl": kl, "judge": judge}


def run_phase(name: str, ctx: Ctx, repeat: int = 1) -> PhaseResult:
    """Run one phase; whatever happens, a result with its wall time (never an exception,
    except an interruption, which unwinds to the destroy)."""
    t0 = time.monotonic()
    try:
        metrics, details = modules()[name].run(ctx)
        result = PhaseResult(name, "ran", metrics=metrics, details=details)
    except Skip as exc:
        result = PhaseResult(name, "skipped", reason=str(exc))
    except PhaseError as exc:
        result = PhaseResult(name, "error", reason=str(exc))
    except Exception as exc:  # a harness fault inside one phase: the others still run
        result = PhaseResult(name, "error", reason=f"{type(exc).__name__}: {exc}")
    result.wall_s = round(time.monotonic() - t0, 3)
    result.repeat = repeat
    return result


def check_offline(cfg: FitnessConfig) -> dict[str, str]:
    """`--dry-run`: each enabled phase's offline check (config, data files); raises UserError."""
    notes = {}
    for name in cfg.enabled():
        check = getattr(modules()[name], "check_offline", None)
        notes[name] = check(cfg) if check else "nothing to check offline"
    return notes
