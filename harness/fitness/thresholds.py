"""Thresholds: a commented YAML of bars, and the PASS/WARN/FAIL verdict of each metric.

    throughput.decode_tps@512: {warn_below: 20, fail_below: 5}
    capacity.worst_ttft_p95_s: {warn_above: 5, fail_above: 30}

FAIL when a fail bar is crossed, else WARN when a warn bar is, else PASS. A metric with
a bar that was not measured (its phase skipped or failed, or null above the served
context) is WARN: a bar you set could not be checked. A bar on a phase turned off by
name is OFF and does not gate. Judge metrics are advisory: their verdicts
are shown, never counted in the exit code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import UserError
from harness.fitness.metrics import lookup, phase_of
from harness.vot.loader import load_yaml

BARS = ("warn_below", "fail_below", "warn_above", "fail_above")
Verdict = Literal["PASS", "WARN", "FAIL"]


@dataclass(frozen=True)
class Bar:
    metric: str
    warn_below: float | None = None
    fail_below: float | None = None
    warn_above: float | None = None
    fail_above: float | None = None

    def judge(self, value: float | None) -> tuple[Verdict, str]:
        if value is None:
            return "WARN", "not measured"
        if self.fail_below is not None and value < self.fail_below:
            return "FAIL", f"{value:g} < {self.fail_below:g}"
        if self.fail_above is not None and value > self.fail_above:
            return "FAIL", f"{value:g} > {self.fail_above:g}"
        if self.warn_below is not None and value < self.warn_below:
            return "WARN", f"{value:g} < {self.warn_below:g}"
        if self.warn_above is not None and value > self.warn_above:
            return "WARN", f"{value:g} > {self.warn_above:g}"
        return "PASS", "within every bar"

    def text(self) -> str:
        return ", ".join(f"{k} {getattr(self, k):g}" for k in BARS if getattr(self, k) is not None)


@dataclass(frozen=True)
class Thresholds:
    path: Path
    sha256: str
    bars: dict[str, Bar]


def load_thresholds(path: Path) -> Thresholds:
    """Read and check a thresholds file; any mistake is one UserError naming the field."""
    path = Path(path)
    raw = load_yaml(path)
    data = raw if raw is not None else {}
    if not isinstance(data, dict):
        raise UserError("must be a mapping of metric: {bar: number}", file=path,
                        fix="e.g. `tooluse.wellformed_rate: {fail_below: 0.8}`")
    bars: dict[str, Bar] = {}
    for key, spec in data.items():
        key = str(key)
        if lookup(key) is None:
            raise UserError(f"unknown metric {key!r}", file=path, field=key,
                            fix="name a metric from `llms-benchmark fitness metrics` (per-context ones as "
                                "throughput.decode_tps@8192)")
        if not isinstance(spec, dict) or not spec:
            raise UserError("must be a mapping of bars", file=path, field=key,
                            fix=f"e.g. `{key}: {{warn_below: 1, fail_below: 0.5}}` (bars: {', '.join(BARS)})")
        values: dict[str, float] = {}
        for bar, value in spec.items():
            if bar not in BARS:
                raise UserError(f"unknown bar {bar!r}", file=path, field=f"{key}.{bar}",
                                fix=f"use {', '.join(BARS)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"must be a number (got {value!r})", file=path, field=f"{key}.{bar}",
                                fix=f"e.g. `{key}: {{{bar}: 0.8}}`")
            values[bar] = float(value)
        lo = (values.get("fail_below"), values.get("warn_below"))
        hi = (values.get("fail_above"), values.get("warn_above"))
        if None not in lo and lo[0] > lo[1]:
            raise UserError("fail_below is above warn_below: the warning could never show", file=path,
                            field=f"{key}.fail_below", fix="set fail_below at or below warn_below")
        if None not in hi and hi[0] < hi[1]:
            raise UserError("fail_above is below warn_above: the warning could never show", file=path,
                            field=f"{key}.fail_above", fix="set fail_above at or above warn_above")
        bars[key] = Bar(key, **values)
    return Thresholds(path.resolve(), hashlib.sha256(path.read_bytes()).hexdigest(), bars)


def verdicts(thresholds: Thresholds, metrics: dict[str, float | None],
             enabled: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per bar: metric, value, verdict, why, and whether it gates. A bar on a phase
    turned off by name is OFF and does not gate (turning a phase off is not a warning)."""
    rows = []
    for key, bar in thresholds.bars.items():
        value = metrics.get(key)
        gates = lookup(key).gates
        if enabled is not None and phase_of(key) not in enabled:
            verdict, why, gates = "OFF", f"phase {phase_of(key)} is off", False
        else:
            verdict, why = bar.judge(value)
        rows.append({"metric": key, "value": value, "verdict": verdict, "why": why, "bars": bar.text(),
                     "gates": gates})
    return rows


def exit_code(rows: list[dict[str, Any]], pipeline_error: bool) -> int:
    """3 pipeline error, else 2 any gating FAIL, 1 any gating WARN, 0 all pass (or no bar)."""
    if pipeline_error:
        return 3
    gating = [r["verdict"] for r in rows if r["gates"]]
    if "FAIL" in gating:
        return 2
    if "WARN" in gating:
        return 1
    return 0


def overall(code: int) -> str:
    return {0: "PASS", 1: "WARN", 2: "FAIL", 3: "ERROR"}[code]
