"""A cell's budget bound: what its serve can bill, not just its missions.

A serve bills from its create to its destroy: the cold start (image pull, weights, until it
lists its model), the speed probe, the smoke, each trial's mission (at most the mission's
time cap), and setup, collect and destroy around them. Each part is read from the preset's
own earlier records on the environment (the longest seen), else the plan's `serve_costs`
defaults; a mission is the longer of its cap and the longest one seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.matrix.plan import ServeCosts
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord

MAX_RECORDS = 400  # the newest records read for a preset's history (bounded on a big project)


@dataclass(frozen=True)
class CellBound:
    cold_start_s: float
    probe_s: float
    smoke_s: float
    destroy_s: float  # setup and collect around the trials, and the destroy
    trial_s: float  # one trial's mission
    trials: int
    gpus: int
    source: str  # "2 earlier serves" / "the plan's serve_costs defaults"

    @property
    def seconds(self) -> float:
        return self.cold_start_s + self.probe_s + self.smoke_s + self.destroy_s + self.trial_s * self.trials

    def usd(self, price: float | None) -> float:
        return self.seconds / 3600 * self.gpus * (price or 0.0)

    def tail_usd(self, price: float | None) -> float:
        """What the serve still bills once it is told to stop: its destroy."""
        return self.destroy_s / 3600 * self.gpus * (price or 0.0)

    def describe(self, price: float | None) -> str:
        return (f"cold start {self.cold_start_s:.0f}s + probe {self.probe_s:.0f}s + smoke {self.smoke_s:.0f}s + "
                f"{self.trials} trial(s) × {self.trial_s:.0f}s + destroy {self.destroy_s:.0f}s ({self.source}), "
                f"{self.gpus} GPU at ${price or 0:g}/GPU-h = ${self.usd(price):.2f}")


def _span(a, b) -> float | None:
    return (b - a).total_seconds() if a is not None and b is not None else None


def _serves(paths: ProjectPaths, environment: str, preset: str) -> list[list[RunRecord]]:
    """The preset's earlier finished serves on the environment, each its trials' records."""
    if not paths.runs.is_dir():
        return []
    groups: dict[str, list[RunRecord]] = {}
    for path in sorted(paths.runs.glob("*/run.json"), reverse=True)[:MAX_RECORDS * 4]:
        if f"-{preset}-" not in path.parent.name:  # run ids carry the preset: most are skipped unread
            continue
        try:
            rec = RunRecord.load(path)
        except (OSError, ValueError):
            continue
        if rec.key.preset != preset or rec.environment != environment or rec.gpu_hours is None:
            continue
        groups.setdefault(rec.trial.group if rec.trial else rec.run_id, []).append(rec)
        if len(groups) >= MAX_RECORDS:
            break
    return [g for g in groups.values() if g]


def estimate(root, environment: str, preset: str, trials: int, cap_minutes: float, defaults: ServeCosts,
             gpus: int = 1) -> CellBound:
    cold, probe, smoke, rest, mission, seen_gpus = [], [], [], [], [], []
    for serve in _serves(ProjectPaths(root), environment, preset):
        first = min(serve, key=lambda r: r.trial.index if r.trial else 1)
        t = first.times
        spans = (_span(t.serve_start, t.ready), _span(t.ready, t.probed), _span(t.probed, t.smoked))
        missions = [m for r in serve if (m := _span(r.times.mission_start, r.times.mission_end)) is not None]
        if None in spans or not first.gpus:
            continue  # a serve that never got through its smoke says nothing of a whole serve
        serve_s = (first.gpu_hours or 0.0) * 3600 / first.gpus
        cold.append(spans[0])
        probe.append(spans[1])
        smoke.append(spans[2])
        rest.append(max(0.0, serve_s - sum(spans) - sum(missions)))
        mission += missions
        seen_gpus.append(first.gpus)
    cap_s = cap_minutes * 60
    if not cold:
        return CellBound(defaults.cold_start_s, defaults.probe_s, defaults.smoke_s, defaults.destroy_s, cap_s,
                         trials, gpus, "the plan's serve_costs defaults: no earlier serve of this preset here")
    return CellBound(max(cold), max(probe), max(smoke), max(rest), max([cap_s, *mission]), trials,
                     max(seen_gpus), f"the longest of {len(cold)} earlier serve(s) of this preset here")
