"""Mission manifests (clear errors naming the field) and the figures a mission run
leaves: phases from the drive record, signals from the query log."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.mission import load_mission, prepare_workspace
from harness.verdicts.phases import queried_signals, read_phases

REPO = Path(__file__).resolve().parents[1]


def _mission(tmp_path: Path, manifest: str) -> Path:
    folder = tmp_path / "missions" / "m"
    shutil.copytree(REPO / "missions" / "hello", folder)
    (folder / "mission.yaml").write_text(manifest)
    return folder


BASE = ("name: m\nprompt: prompt.md\nworkspace: workspace\nreport: REPORT.md\nmin_context: 16384\n"
        "time_cap_minutes: 5\nstall_minutes: 1\n")


@pytest.mark.parametrize("manifest, field, phrase", [
    (BASE.replace("prompt: prompt.md\n", ""), "prompt", "is required"),
    (BASE + "promt: x.md\n", "promt", "unknown key 'promt'"),
    (BASE.replace("workspace: workspace", "workspace: nowhere"), "workspace", "does not exist"),
    (BASE.replace("prompt: prompt.md", "prompt: missing.md"), "prompt", "does not exist"),
    (BASE + "setup: infra/none.py\n", "setup", "does not exist"),
    (BASE.replace("min_context: 16384", "min_context: lots"), "min_context", "integer"),
])
def test_bad_manifests_name_the_field(tmp_path, manifest, field, phrase):
    _mission(tmp_path, manifest)
    with pytest.raises(UserError) as exc:
        load_mission(tmp_path, "m")
    assert exc.value.field == field and phrase in exc.value.render()
    assert exc.value.file.endswith("mission.yaml")


def test_shipped_missions_load_and_workspaces_are_fresh_copies(tmp_path):
    for name in ("hello", "observability"):
        mission = load_mission(REPO, name)
        dest = prepare_workspace(mission, tmp_path / name)
        assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in mission.workspace_dir.iterdir())
    assert load_mission(REPO, "observability").manifest.min_context == 65536
    # the hidden key and the infrastructure stay outside the workspace the agent gets
    assert not (tmp_path / "observability" / "key").exists() and not (tmp_path / "observability" / "infra").exists()


def test_phases_from_the_drive_record(tmp_path):
    record = tmp_path / "drive.json"
    record.write_text(json.dumps({"start": "2026-11-30T01:00:10Z", "end": "2026-11-30T01:02:10.5Z"}))
    start, end = datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC), datetime(2026, 11, 30, 1, 10, 0, tzinfo=UTC)
    phases = read_phases(record, start, end)
    assert (phases.preflight_s, phases.drive_s, phases.observation_s) == (10.0, 120.5, 469.5)
    assert read_phases(tmp_path / "missing.json", start, end).drive_s is None


def test_signals_count_only_queries_that_returned_rows(tmp_path):
    log = tmp_path / "calls.jsonl"
    calls = [
        {"signal": "traces", "rows": 3, "ok": True},
        {"signal": "metrics", "rows": 0, "ok": True},  # empty: does not count
        {"signal": "logs", "rows": 5, "ok": False},  # failed: does not count
        {"signal": "sql", "rows": 9, "ok": True},  # a query with no table named: no signal
        {"signal": "profiles", "rows": 2, "ok": True},
    ]
    log.write_text("\n".join(json.dumps(c) for c in calls) + "\nnot json\n")
    assert queried_signals(log) == ["traces", "profiles"]
    assert queried_signals(tmp_path / "none.jsonl") == []


def test_obs_sql_counts_for_the_signals_of_the_tables_it_reads(tmp_path):
    log = tmp_path / "calls.jsonl"
    calls = [
        {"signal": "sql", "args": ["sql", "SELECT count(*) FROM logs l JOIN spans s ON l.span_id = s.span_id"],
         "rows": 1, "ok": True},
        {"signal": "sql", "args": ["sql", "SELECT * FROM profiles"], "rows": 0, "ok": True},  # empty
        {"signal": "sql", "args": ["sql", "SELECT 1"], "rows": 1, "ok": True},  # no table
        # A table named only in a comment is not read (it was counted when a regex read the SQL).
        {"signal": "sql", "args": ["sql", "SELECT 1 /* FROM metrics */", "--limit", "5"], "rows": 1, "ok": True},
    ]
    log.write_text("\n".join(json.dumps(c) for c in calls) + "\n")
    assert queried_signals(log) == ["traces", "logs"]
