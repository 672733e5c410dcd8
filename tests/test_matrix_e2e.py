"""`llms-benchmark matrix` end to end on local replay units with the real opencode CLI: the
azure tests' plan (4 presets, --parallel 3) on the `replay` environment, every cell a real
launch (serve, probe, smoke, the mission in the sandbox, destroy) running beside the others on
one launcher: no port, run folder or serve-once claim collides.

One trial per cell, not the azure tests' two: K trials on one serve are the launch's own
(tests/test_trials.py) and each trial here is a whole opencode run on a 2-core suite (measured:
4 × 2 trials took 200 s, 4 × 1 takes 125–140 s)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import Project
from test_launch_e2e import SMALL_PROBE, dump

PRESETS = ["replay-hello", "replay-hello-b", "replay-hello-c", "replay-hello-d"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_four_replay_presets_three_at_once_with_the_real_opencode(project: Project):
    for name in PRESETS[1:]:
        project.add_preset(name, trajectory="hello")
    folder = project.root / ".vot" / "matrices"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "replay.yaml").write_text(yaml.safe_dump({
        "environment": "replay", "presets": PRESETS, "mission": "hello", "trials": 1, "parallel": 3,
        "probe_long_tokens": int(SMALL_PROBE[1])}))
    code, out, err = project.run_cli(["matrix", "replay", "--json"], timeout=840)
    assert code == 0, dump(out, err)
    state = json.loads(out)
    assert state["parallel"] == 3
    records = {r["run_id"]: r for r in project.records()}
    assert len(records) == 4, sorted(records)
    windows = []
    for cell in state["cells"]:
        assert cell["status"] == "done" and len(cell["attempts"]) == 1, cell
        run_ids = cell["attempts"][0]["run_ids"]
        recs = [records[r] for r in run_ids]
        assert len(recs) == 1 and recs[0]["trial"] is None
        assert all(r["status"] == "ok" and r["run"]["report_found"] and r["unit"] == f"vot-{cell['preset']}"
                   for r in recs), [r["reason"] for r in recs]
        windows.append((recs[0]["times"]["serve_start"], recs[0]["times"]["destroyed"]))
    # Cells ran at once (serves overlapped), never more than three.
    events = sorted([(s, 1) for s, _ in windows] + [(d, -1) for _, d in windows], key=lambda e: (e[0], e[1]))
    alive = peak = 0
    for _, step in events:
        alive += step
        peak = max(peak, alive)
    assert 2 <= peak <= 3, windows
    assert project.ledger() == {}
    assert not project.survivors(), "processes survive the matrix"
    report = (project.root / ".llms-benchmark" / "matrices" / "replay" / "report.md").read_text()
    assert sum("1 of 1 with a row" in line for line in report.splitlines()) == 4, report
