"""Launches at once: two presets side by side never clobber each other (the ledger is
locked), a second launch of a served preset refuses by the unit's name, and the page is
rewritten under a lock."""

from __future__ import annotations

import subprocess
import time

import pytest

from harness.atomic import file_lock
from conftest import Project, stop
from test_launch_e2e import SMALL_PROBE, dump, wait_for


def launch(project: Project, preset: str) -> subprocess.Popen:
    return project.popen(["launch", "local", "replay", preset, "--mission", "hello", *SMALL_PROBE])


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_two_presets_at_once_both_succeed(project: Project):
    project.add_preset("replay-hello-b", trajectory="hello")
    first, second = launch(project, "replay-hello"), launch(project, "replay-hello-b")
    outs = []
    for proc in (first, second):
        try:
            outs.append(proc.communicate(timeout=400))
        except subprocess.TimeoutExpired:
            outs.append(stop(proc))
    for proc, (out, err) in zip((first, second), outs):
        assert proc.returncode == 0, dump(out, err)
    records = project.records()
    assert sorted(r["key"]["preset"] for r in records) == ["replay-hello", "replay-hello-b"]
    assert all(r["status"] == "ok" and r["times"]["destroyed"] for r in records)
    assert len({r["run_id"] for r in records}) == 2
    assert project.ledger() == {}


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_second_launch_of_a_served_preset_refuses(project: Project):
    project.add_trajectory("stall")
    project.add_preset("replay-stall", trajectory="stall")
    first = launch(project, "replay-stall")
    try:
        wait_for("the first launch's unit in the ledger", lambda: project.ledger(), 120, first)
        code, out, err = project.run_cli(["launch", "local", "replay", "replay-stall", "--mission", "hello"],
                                         timeout=120)
        flat = " ".join(err.split())
        assert code == 2, dump(out, err)
        assert "vot-replay-stall is already served on replay" in flat
        assert "llms-benchmark destroy replay replay-stall" in flat
        assert list(project.ledger()) == ["replay/vot-replay-stall"]  # the first one's unit is untouched
        assert first.poll() is None
    finally:
        out, err = stop(first)
    assert project.ledger() == {}, dump(out, err)


def test_the_page_is_rewritten_under_a_lock(project: Project):
    page = project.root / "page.md"
    page.write_text("# page\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    with file_lock(page):
        proc = project.popen(["render", "--page", str(page)])
        time.sleep(2.0)
        assert proc.poll() is None, "render must wait for the lock"
        assert "Local serving" not in page.read_text()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, dump(out, err)
    assert "### Local serving" in page.read_text()
