"""As root, the agent's folders on a bounded ext4 image: writes stop at its size whatever their
form, the folders kept are copied back off it by descriptor, and a crashed launch's images
are swept on the next start (one of a live launch never)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.sandbox import diskimage

needs_mount = pytest.mark.skipif(not diskimage.available(), reason="needs root, loop devices and mkfs.ext4")
MiB = 1 << 20


@needs_mount
def test_writes_stop_at_the_image_and_kept_folders_come_back(tmp_path: Path):
    ws, tmp = tmp_path / "workspace", tmp_path / "agent-tmp"
    ws.mkdir()
    (ws / "template.txt").write_text("from the harness\n")
    disk = diskimage.AgentDisk(f"test-{os.getpid()}-{tmp_path.name}", cap=32 * MiB)
    disk.mount([ws, tmp])
    try:
        assert os.path.ismount(ws) and (ws / "template.txt").read_text() == "from the harness\n"
        written, failed = 0, None
        hidden = os.open(ws, os.O_TMPFILE | os.O_WRONLY, 0o600)  # named nowhere: the image counts it all the same
        try:
            while written < 200 * MiB:
                os.write(hidden, b"x" * MiB)
                written += MiB
        except OSError as exc:
            failed = exc.errno
        finally:
            os.close(hidden)
        assert failed == errno.ENOSPC and written <= disk.size
        (ws / "REPORT.md").write_text("the agent's\n")
        (ws / "link").symlink_to("/etc/passwd")
        (tmp / "scratch").write_text("gone\n")
    finally:
        problems = disk.release(keep=(ws,))
    assert problems == []
    assert not os.path.ismount(ws) and not os.path.ismount(tmp)
    assert (ws / "REPORT.md").read_text() == "the agent's\n" and os.readlink(ws / "link") == "/etc/passwd"
    assert not (tmp / "scratch").exists()  # not kept: gone with the image
    assert not (diskimage.IMAGES / disk.name).exists()


@needs_mount
def test_a_crashed_launchs_image_is_swept_and_a_live_ones_is_not(tmp_path: Path):
    live_ws, dead_ws = tmp_path / "live", tmp_path / "dead"
    live = diskimage.AgentDisk(f"test-live-{tmp_path.name}", cap=16 * MiB)
    live.mount([live_ws])
    crashed = subprocess.run([sys.executable, "-c", (
        "import sys; from pathlib import Path; from harness.sandbox import diskimage\n"
        f"d = diskimage.AgentDisk('test-dead-{tmp_path.name}', cap=16 << 20); d.mount([Path({str(dead_ws)!r})])\n")],
        capture_output=True, text=True, timeout=120)
    assert crashed.returncode == 0, crashed.stderr
    try:
        assert os.path.ismount(dead_ws)
        swept = diskimage.sweep()
        assert f"test-dead-{tmp_path.name}" in swept and f"test-live-{tmp_path.name}" not in swept
        assert not os.path.ismount(dead_ws) and os.path.ismount(live_ws)
    finally:
        live.release()


@needs_mount
def test_a_parallel_launchs_image_between_mkdir_and_owner_is_left_alone(tmp_path: Path, monkeypatch):
    """Launches start together (a matrix): one's sweep must not take another's image in the
    instant between its folder's mkdir and its owner file; an unowned folder past the grace is swept."""
    monkeypatch.setattr(diskimage, "IMAGES", tmp_path / "images")
    fresh, stale = tmp_path / "images" / "fresh", tmp_path / "images" / "stale"
    fresh.mkdir(parents=True)
    stale.mkdir()
    old = diskimage.time.time() - diskimage.UNOWNED_GRACE_S - 5
    os.utime(stale, (old, old))
    assert diskimage.sweep() == ["stale"]
    assert fresh.is_dir() and not stale.exists()


def _mount_points() -> list[str]:
    return [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


needs_root_mount = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to bind-mount")


@needs_root_mount
def test_the_sweep_unmounts_nothing_a_listing_names_only_what_its_image_bound(tmp_path: Path, monkeypatch):
    """/var/tmp is anyone's: a crashed-looking image folder whose listing names a mount point
    of someone else's (here a tmpfs at `victim`) never gets it unmounted by root's sweep."""
    monkeypatch.setattr(diskimage, "IMAGES", tmp_path / "images")
    home = tmp_path / "images" / "crashed"
    home.mkdir(parents=True)
    os.utime(home, (0, 0))
    victim = tmp_path / "victim"
    victim.mkdir()
    (home / "folders").write_text(f"{victim}\n")
    (home / "owner").write_text("1 0\n")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(victim)], check=True, timeout=30)
    try:
        assert _mount_points().count(str(victim)) == 1
        assert diskimage.sweep() == ["crashed"]
        assert _mount_points().count(str(victim)) == 1  # still there
        assert not home.exists()
    finally:
        subprocess.run(["umount", "-l", str(victim)], timeout=30)


@needs_root_mount
def test_an_images_folder_someone_else_made_is_never_used_nor_swept(tmp_path: Path, monkeypatch):
    images = tmp_path / "images"
    monkeypatch.setattr(diskimage, "IMAGES", images)
    (images / "planted").mkdir(parents=True)
    os.chown(images, 65534, 65534)
    assert diskimage.sweep() == []
    assert (images / "planted").is_dir()
    with pytest.raises(diskimage.Unavailable, match="not a folder of root's own"):
        diskimage._images()


@needs_mount
def test_kept_folders_share_one_bound_and_holes_stay_holes(tmp_path: Path):
    """Sparse files copied off the image: each keeps its holes (never expanded into the run
    folder), and the kept folders together count their apparent sizes against one bound (each
    had the image's size once: 4 GiB in a run folder under a 2 GiB cap)."""
    ws, home = tmp_path / "workspace", tmp_path / "opencode"
    disk = diskimage.AgentDisk(f"test-{os.getpid()}-{tmp_path.name}", cap=32 * MiB)
    disk.mount([ws, home])
    try:
        apparent = disk.size * 2 // 3  # under the bound alone, over it together
        for folder in (ws, home):
            with open(folder / "sparse.db", "wb") as f:
                f.write(b"SQLite format 3\x00")
                f.truncate(apparent)
    finally:
        problems = disk.release(keep=(ws, home))
    assert len(problems) == 1 and "could not be copied off the image (more than the copy's byte bound" in problems[0]
    kept = [f for f in (ws, home) if (f / "sparse.db").exists()]
    assert len(kept) == 1 and not [f for f in (ws, home) if f not in kept and f.exists()]
    st = (kept[0] / "sparse.db").stat()
    assert st.st_size == apparent and st.st_blocks * 512 < MiB


@needs_mount
def test_a_crashed_launchs_pending_collect_gets_its_folders_back_from_the_sweep(tmp_path: Path):
    """Issue 61: a launch SIGKILLed in its destroy left a trial whose mission finished: any later
    command's sweep copies the folders its collect reads off the image before deleting it (and
    only those: the agent's TMPDIR goes with the image). A pending file that is a link is not read."""
    from harness.launcher import pending

    runs = []
    for name, link in (("kept", False), ("linked", True)):
        run = tmp_path / name
        run.mkdir()
        folders = [run / "workspace", run / "opencode", run / "agent-tmp"]
        listing = '{"kept": ["workspace", "opencode"]}'
        if link:
            (tmp_path / "elsewhere.json").write_text(listing)
            (run / "collect-pending.json").symlink_to(tmp_path / "elsewhere.json")
        else:
            (run / "collect-pending.json").write_text(listing)
        script = (
            "from pathlib import Path; from harness.sandbox import diskimage\n"
            f"d = diskimage.AgentDisk('test-pending-{name}-{tmp_path.name}', cap=16 << 20)\n"
            f"folders = [Path(p) for p in {[str(f) for f in folders]!r}]\n"
            "d.mount(folders)\n"
            "for f in folders: (f / 'agent.txt').write_text('written on the image')\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        runs.append((run, folders))
    swept = diskimage.sweep(keep=pending.kept_folder)
    assert {f"test-pending-kept-{tmp_path.name}", f"test-pending-linked-{tmp_path.name}"} <= set(swept)
    (kept_run, (ws, home, tmp)), (_, linked) = runs
    assert not any(os.path.ismount(f) for f in (ws, home, tmp, *linked))
    assert (ws / "agent.txt").read_text() == "written on the image" and (home / "agent.txt").is_file()
    assert not (tmp / "agent.txt").exists()
    assert not any((f / "agent.txt").exists() for f in linked)  # a linked listing is never followed
