"""Collect over opencode 1.18.33's real store schema: sums over the session tree,
turns, median turn, compactions, root selection."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.opencode.store import collect

SCHEMA = Path(__file__).parent / "fixtures" / "opencode-1.18.33-schema.sql"


def _store(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    data = tmp_path / "opencode"
    data.mkdir()
    conn = sqlite3.connect(data / "opencode.db")
    conn.executescript(SCHEMA.read_text())
    conn.execute("INSERT INTO project (id, worktree, time_created, time_updated, sandboxes) VALUES ('global', '/', 0, 0, '[]')")
    return data, conn


def _session(conn, sid, title, parent=None, created=1_000_000, tokens=(0, 0, 0, 0, 0)):
    conn.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, tokens_input, tokens_output,"
        " tokens_reasoning, tokens_cache_read, tokens_cache_write, time_created, time_updated)"
        " VALUES (?, 'global', ?, ?, '/w', ?, '1.18.33', ?, ?, ?, ?, ?, ?, ?)",
        (sid, parent, sid, title, *tokens, created, created),
    )


def _assistant(conn, sid, mid, created, completed, **extra):
    data = {"role": "assistant", "time": {"created": created, "completed": completed}, **extra}
    conn.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                 (mid, sid, created, created, json.dumps(data)))


def test_sums_the_whole_tree_and_reads_turns_median_and_compactions(tmp_path):
    data, conn = _store(tmp_path)
    _session(conn, "ses_root", "llms-benchmark p", tokens=(100, 50, 10, 1000, 20))
    _session(conn, "ses_sub", "subagent", parent="ses_root", tokens=(7, 3, 2, 500, 0))
    _session(conn, "ses_subsub", "nested", parent="ses_sub", tokens=(1, 1, 0, 0, 0))
    _session(conn, "ses_other", "llms-benchmark other", tokens=(9999, 9999, 0, 0, 0))
    _assistant(conn, "ses_root", "m1", 1_000, 3_000)  # 2 s
    _assistant(conn, "ses_root", "m2", 5_000, 10_000, summary=True, mode="compaction")  # 5 s
    _assistant(conn, "ses_sub", "m3", 11_000, 12_000)  # 1 s
    _assistant(conn, "ses_subsub", "m4", 13_000, 20_000)  # 7 s
    _assistant(conn, "ses_sub", "m5", 21_000, None)  # never completed: not in the median
    _assistant(conn, "ses_other", "x1", 1_000, 100_000)
    conn.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES "
                 "('u1', 'ses_root', 0, 0, '{\"role\": \"user\", \"time\": {\"created\": 0}}')")
    conn.commit()
    conn.close()

    figures = collect(data, title="llms-benchmark p")
    assert figures.root_session == "ses_root" and figures.sessions == 3
    assert figures.tokens.input == (100 + 7 + 1) + (1000 + 500) + 20
    assert figures.tokens.output == (50 + 3 + 1) + (10 + 2)
    assert figures.tokens.cache == 1500 + 20
    assert figures.turns == 5
    assert figures.median_turn_s == 3.5  # median of 1, 2, 5, 7
    assert figures.compactions == 1
    assert figures.opencode_version == "1.18.33"


def test_root_selection_must_be_unambiguous(tmp_path):
    data, conn = _store(tmp_path)
    _session(conn, "ses_a", "same", created=1_000)
    _session(conn, "ses_b", "same", created=2_000)
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="2 root sessions match"):
        collect(data, title="same")
    assert collect(data, session_id="ses_b").root_session == "ses_b"


def test_reads_committed_wal_frames_of_a_live_store(tmp_path):
    data, conn = _store(tmp_path)
    conn.commit()
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.execute("PRAGMA wal_autocheckpoint=0")
    _session(conn, "ses_live", "live", tokens=(5, 6, 0, 0, 0))
    conn.commit()  # left in the -wal file: the connection stays open, no checkpoint
    try:
        assert (data / "opencode.db-wal").exists()
        assert collect(data, title="live").tokens.input == 5
    finally:
        conn.close()


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no opencode session store"):
        collect(tmp_path)


def test_an_unknown_store_schema_is_refused_by_name(tmp_path):
    # opencode 2.x's layout (reported by other tools' users): sessions in session_v2, no session table.
    data = tmp_path / "opencode"
    data.mkdir()
    conn = sqlite3.connect(data / "opencode.db")
    conn.executescript("CREATE TABLE session_v2 (id TEXT PRIMARY KEY, data TEXT);"
                       "CREATE TABLE session_message (id TEXT PRIMARY KEY, session_id TEXT, data TEXT);"
                       "CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, data TEXT);")
    conn.commit()
    conn.close()
    with pytest.raises(UserError) as err:
        collect(data, title="t")
    text = err.value.render()
    assert "unknown opencode store schema" in text and "no table session" in text and "no table message" in text
    assert "session_v2" in text and "opencode-ai 1.18" in text


def test_the_pinned_schema_passes_the_check(tmp_path):
    data, conn = _store(tmp_path)
    _session(conn, "ses_a", "t")
    conn.commit()
    assert collect(data, title="t").root_session == "ses_a"


# -- the session counted is the one the harness's own opencode started ----------------------
def _hostile_store(tmp_path: Path) -> Path:
    """The harness's root (ses_own, with a subagent) and, beside it, what a daemonized opencode
    the agent ran left: a root of its own under the harness's very title, with a child."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    data, conn = _store(xdg)
    _session(conn, "ses_own", "llms-benchmark p", created=1_000, tokens=(100, 10, 0, 0, 0))
    _session(conn, "ses_own_sub", "subagent", parent="ses_own", created=1_500, tokens=(20, 2, 0, 0, 0))
    _session(conn, "ses_daemon", "llms-benchmark p", created=2_000, tokens=(18_310, 40, 0, 0, 0))
    _session(conn, "ses_daemon_sub", "subagent", parent="ses_daemon", created=2_500, tokens=(500, 5, 0, 0, 0))
    _assistant(conn, "ses_own", "m1", 1_000, 2_000)
    _assistant(conn, "ses_own_sub", "m2", 1_500, 1_900)
    _assistant(conn, "ses_daemon", "d1", 2_000, 3_000)
    _assistant(conn, "ses_daemon", "d2", 3_000, 4_000)
    _assistant(conn, "ses_daemon_sub", "d3", 3_000, 4_000)
    conn.commit()
    conn.close()
    return xdg


def _stage(tmp_path: Path, xdg: Path, session_id: str | None):
    """The real collect stage over a run whose opencode reported `session_id` on its events."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from harness.records.paths import RunPaths
    from harness.records.record import RowKey, RunOutcome, RunRecord, Timestamps
    from harness.stages.collect import collect as collect_stage

    start = datetime.fromtimestamp(0, UTC)
    rec = RunRecord(run_id="r", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="x"),
                    environment="e", stack="s", mission="hello",
                    times=Timestamps(launch=start, mission_start=start, mission_end=datetime.now(UTC)))
    rec.run = RunOutcome(exit_code=0, report_found=True)
    said: list[str] = []
    paths = RunPaths(tmp_path / "run")
    paths.dir.mkdir()
    manifest = SimpleNamespace(drive_record=None, drive_user_agent=None, signal_log=None, report="REPORT.md")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "REPORT.md").write_text("report\n")
    ctx = SimpleNamespace(
        env={"XDG_DATA_HOME": str(xdg)}, title="llms-benchmark p", say=said.append, paths=paths,
        result=SimpleNamespace(session_id=session_id, stopped_at=None, ended_by=None, exit_code=0, errors=[]),
        pf=SimpleNamespace(env=SimpleNamespace(gpu_hourly_usd=None, gpu_price_source=None),
                           mission=SimpleNamespace(manifest=manifest)),
        workspace=tmp_path / "w", wire_counts={}, wire_decisive=[], untrusted=[], drive=None, report_snapshot=None)
    collect_stage(rec, ctx)
    return rec, said


def test_a_foreign_root_session_never_reaches_the_row_and_is_counted_apart(tmp_path):
    rec, said = _stage(tmp_path, _hostile_store(tmp_path), "ses_own")
    s = rec.session
    assert s.root_session == "ses_own" and s.sessions == 2 and s.turns == 2, s
    assert s.tokens.input == 120 and s.tokens.output == 12, s.tokens  # the daemon's 18,810 left out
    assert s.foreign_sessions == 2, s
    assert any("2 session(s) in opencode's store outside" in line for line in said), said
    assert rec.status == "ok" and rec.run.report_found, rec.reason


def test_no_session_id_on_the_events_counts_no_session_whatever_the_store_holds(tmp_path):
    """The harness's opencode named no session (it died first, say): a root the agent's own
    opencode left under the harness's title is not taken for it."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    data, conn = _store(xdg)
    _session(conn, "ses_daemon", "llms-benchmark p", created=2_000, tokens=(18_310, 40, 0, 0, 0))
    _assistant(conn, "ses_daemon", "d1", 2_000, 3_000)
    conn.commit()
    conn.close()
    rec, said = _stage(tmp_path, xdg, None)
    assert rec.session is None and rec.status == "void", rec
    assert "no session found" in rec.reason and any("named no session" in line for line in said), said
