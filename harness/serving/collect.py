"""After a run: join the store's calls with the timeline, write the per-turn table, and
build the record's serving section (tool-call health and the store cross-check included)."""

from __future__ import annotations

import traceback
from pathlib import Path

from harness.records.paths import RunPaths
from harness.records.serving import ServingFigures
from harness.serving.join import join, write_table
from harness.serving.section import serving_section
from harness.serving.storecheck import cross_check
from harness.serving.timeline import load_timeline
from harness.serving.toolcalls import tool_call_health
from harness.serving.turns import load_turns


def collect_serving(data_dir: Path, root_session: str, run_dir: Path, timeline: Path,
                    events: Path) -> ServingFigures:
    """Never stands between a run and its row: a failure here is a note (traceback kept)."""
    try:
        return _collect(data_dir, root_session, run_dir, timeline, events)
    except Exception as exc:  # noqa: BLE001 - a harness bug in an extra; the row stands
        (run_dir / "serving-fault.txt").write_text(traceback.format_exc())
        return ServingFigures(notes=[f"serving join failed: {type(exc).__name__}: {exc} (serving-fault.txt)"])


def _collect(data_dir: Path, root_session: str, run_dir: Path, timeline: Path, events: Path) -> ServingFigures:
    turns = load_turns(data_dir, root_session)
    readings = [r for r in load_timeline(timeline) if r.get("reachable", True) is not False]
    rows = join(turns, readings)
    write_table(rows, RunPaths(run_dir).serving_table)
    fig = serving_section(rows, readings, tool_call_health(turns))
    fig.store_check = cross_check(turns, events, readings)
    return fig


def gpu_cost(gpu_hours: float | None, hourly_usd: float | None) -> float | None:
    if gpu_hours is None or hourly_usd is None:
        return None
    return round(gpu_hours * hourly_usd, 4)
