"""Reading what the agent wrote: a link (to a file or through a folder), a FIFO, a path
out of the workspace or a file over the cap is refused, with a reason for the record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.sandbox import untrusted
from harness.errors import UserError
from harness.mission import load_mission_dir
from conftest import REPO

CANARY = "HOST-CANARY-5d1e"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text(CANARY)
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "ok.md").write_text("fine\n")
    return ws


def test_a_plain_file_is_read(ws: Path):
    assert untrusted.read_text(ws, "d/ok.md", 100) == "fine\n"
    dest = ws.parent / "report.md"
    untrusted.copy_out(ws, "d/ok.md", dest, 100)
    assert dest.read_text() == "fine\n" and not dest.is_symlink()


@pytest.mark.parametrize("make, relative, why", [
    (lambda ws: (ws / "R.md").symlink_to(ws.parent / "host" / "secret.txt"), "R.md", "R.md is a symbolic link"),
    (lambda ws: (ws / "L").symlink_to(ws.parent / "host"), "L/secret.txt", "L is a symbolic link"),
    (lambda ws: (ws / "d" / "in.md").symlink_to(ws / "d" / "ok.md"), "d/in.md", "d/in.md is a symbolic link"),
    (lambda ws: os.mkfifo(ws / "fifo"), "fifo", "fifo is not a regular file"),
    (lambda ws: (ws / "big.md").write_bytes(b"x" * 101), "big.md", "big.md is 101 bytes, over the 100-byte cap"),
])
def test_links_odd_files_and_oversize_are_refused(ws: Path, make, relative: str, why: str):
    make(ws)
    with pytest.raises(untrusted.Refused) as caught:
        untrusted.read_bytes(ws, relative, 100)
    assert why in str(caught.value)
    dest = ws.parent / "report.md"
    with pytest.raises(untrusted.Refused):
        untrusted.copy_out(ws, relative, dest, 100)
    assert not dest.exists()


@pytest.mark.parametrize("relative", ["../host/secret.txt", "/etc/passwd", "", ".", "d/../../host/secret.txt"])
def test_paths_out_of_the_workspace_are_refused(ws: Path, relative: str):
    with pytest.raises(ValueError, match="inside the workspace"):
        untrusted.read_bytes(ws, relative, 100)


def test_a_missing_file_is_missing(ws: Path):
    with pytest.raises(FileNotFoundError):
        untrusted.read_bytes(ws, "nope.md", 100)


@pytest.mark.parametrize("field, value", [("report", "../x.md"), ("drive_record", "/srv/drive.json"),
                                          ("signal_log", "a/../../calls.jsonl")])
def test_a_manifest_path_out_of_the_workspace_is_an_input_error(tmp_path: Path, field: str, value: str):
    import shutil

    import yaml

    folder = tmp_path / "hello"
    shutil.copytree(REPO / "missions" / "hello", folder)
    data = yaml.safe_load((folder / "mission.yaml").read_text())
    data[field] = value
    (folder / "mission.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as caught:
        load_mission_dir(folder)
    text = caught.value.render()
    assert field in text and "outside the workspace" in text and "without '..'" in text
