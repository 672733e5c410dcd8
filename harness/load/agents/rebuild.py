"""A sweep's level figures again from what its agents.json keeps of every turn (run.py writes
each level's turns and each repeat's run beside the figures): the figures a capacity result
states are then checked against their inputs, never only copied (bench/agents_capacity.py).

The /metrics readings (`server`) are the watcher's, not the turns': they are carried as saved.
"""

from __future__ import annotations

from dataclasses import fields

from harness.load.agents.replay import ReplayResult, TurnResult
from harness.load.agents.slo import PRODUCT_SLO, Slo
from harness.load.agents.sweep import LevelStats

_TURN = {f.name for f in fields(TurnResult)}
_RUN = ("timed_out", "wall_s", "exact_tokens", "warmed", "warm_errors", "window_s", "warmup_s")


class NotRebuildable(ValueError):
    """The record keeps no turns to rebuild from (written before run.py kept them)."""


def slo_of(record: dict) -> Slo:
    d = record.get("slo_def") or {}
    if not d:
        return PRODUCT_SLO
    return Slo(ttft_p99_s=float(d["ttft_p99_s"]), turn_p99_s=float(d["turn_p99_s"]),
               percentile=float(d.get("percentile", 99.0)))


def levels(record: dict) -> list[LevelStats]:
    """Every level of the sweep, in the order it ran, judged again under the sweep's own SLO."""
    turns_by, runs_by = record.get("turns_by_level"), record.get("runs_by_level")
    if not isinstance(turns_by, dict) or not isinstance(runs_by, dict):
        raise NotRebuildable("no turns_by_level / runs_by_level: the figures can only be read as saved")
    slo = slo_of(record)
    out = []
    for saved in record.get("levels") or []:
        n = str(saved["copies"])
        runs = runs_by.get(n)
        if not runs:
            raise NotRebuildable(f"level {n}: no runs kept")
        results = [ReplayResult(copies=saved["copies"], **{k: run[k] for k in _RUN if k in run}) for run in runs]
        for row in turns_by.get(n) or []:
            results[int(row.get("repeat", 0))].turns.append(TurnResult(**{k: v for k, v in row.items() if k in _TURN}))
        stats = LevelStats.of(results, slo).judge(slo)
        stats.server = saved.get("server")
        if saved.get("verdict") == "invalid" and stats.verdict != "invalid":
            # Invalid for what the turns cannot show (the server no longer answered after the level,
            # asked by the sweep): it stays invalid, never a fail (issue 61).
            stats.passed, stats.verdict = False, "invalid"
            stats.why = str(saved.get("why") or "invalid: the sweep found the server gone after this level")
        out.append(stats)
    return out
