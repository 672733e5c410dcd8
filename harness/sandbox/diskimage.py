"""As root, the agent's writable folders on a filesystem of bounded size: a hard disk cap.

The disk watcher (limits.DiskWatch) totals the agent's folders every second; between two
looks a fast writer can go past the cap, and the host's disk is what it fills. Launched by
root (where the kernel offers loop devices), each stay's writable folders are moved onto an
ext4 image of `cap` × 1.1 + 64 MiB, loop-mounted `nosuid,nodev` in a private folder and
bind-mounted over the folders' own paths: whatever the agent writes — named, unnamed
(`O_TMPFILE`), sparse, nested past PATH_MAX — lands on the image, and the image cannot
grow past its size (the watcher still ends the run at the cap, a little before). The
image lives outside the run folder (`IMAGES`, on disk, never in memory); when the stay is
released the folders are unmounted (the agent's writes go with the image, deleted) and
the folders show what the harness put there before. A crash leaves mounts under the run
folder: `sweep` unmounts them and deletes their images on the next start.

An ordinary user cannot mount; there the watcher is the cap, and the record says which.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.sandbox import agentfs

IMAGES = Path("/var/tmp/llms-benchmark-disks")
SLACK, OVERHEAD = 1.1, 64 << 20  # the watcher ends the run at the cap; the image stops writes a little past it


class Unavailable(Exception):
    """No bounded filesystem here (not root, no loop device, no mkfs.ext4, a mount refused)."""


def available() -> bool:
    return (os.geteuid() == 0 and os.path.exists("/dev/loop-control") and shutil.which("mkfs.ext4") is not None
            and shutil.which("mount") is not None)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(argv[:2])}: {(done.stderr or done.stdout).strip()[:200]}")


def _mounted(path: Path) -> bool:
    return os.path.ismount(path)


def _root_owned_dir(path: Path) -> bool:
    """A real folder (not a link) owned by root that no one else may write: /var/tmp is anyone's,
    so a folder there a user made first (or a listing a user wrote) is never acted on."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def _images() -> Path:
    """IMAGES, made here if missing, refused unless root's own (Unavailable)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(IMAGES, 0o700)
    if not _root_owned_dir(IMAGES):
        raise Unavailable(f"{IMAGES} is not a folder of root's own (someone else made it first)")
    return IMAGES


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _binds_of(mnt: Path) -> dict[str, str]:
    """mount point → the folder of the image mounted at `mnt` it shows ("/0", "/1"): the binds
    this image made, read from the kernel's own table (never from a listing on disk)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return {}
    rows = [line.split(" ") for line in lines]
    device = next((r[2] for r in rows if len(r) > 4 and _unescape(r[4]) == str(mnt)), None)
    if device is None:
        return {}
    return {_unescape(r[4]): _unescape(r[3]) for r in rows if len(r) > 4 and r[2] == device and _unescape(r[4]) != str(mnt)}


@dataclass
class AgentDisk:
    """One stay's image: `mount(folders)`, later `release()` (idempotent)."""

    name: str  # the run id and the stay (smoke, mission): the image's folder under IMAGES
    cap: int
    folders: list[Path] = field(default_factory=list)
    home: Path | None = None

    @property
    def size(self) -> int:
        return int(self.cap * SLACK) + OVERHEAD

    def mount(self, folders: list[Path]) -> None:
        if not available():
            raise Unavailable("not root, or no loop device or mkfs.ext4 here")
        self.home = _images() / self.name
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True, mode=0o700)
        image, mnt = self.home / "disk.img", self.home / "mnt"
        mnt.mkdir(mode=0o700)
        me = psutil.Process()
        (self.home / "owner").write_text(f"{me.pid} {me.create_time()}\n")  # for `sweep` after a crash
        try:
            with open(image, "wb") as f:
                f.truncate(self.size)  # sparse: the host disk holds what is written, no more than `size`
            _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(image)])
            _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(mnt)])
            for n, folder in enumerate(folders):
                own = mnt / str(n)
                # What the harness put there (the mission's workspace, opencode's config) goes along.
                if folder.is_dir():
                    shutil.copytree(folder, own, symlinks=True)
                else:
                    own.mkdir()
                    folder.mkdir(parents=True)
                self.folders.append(folder)
                (self.home / "folders").write_text("".join(f"{f}\n" for f in self.folders))
                _run(["mount", "--bind", str(own), str(folder)])
        except BaseException:
            self.release()
            raise

    def release(self, keep: tuple[Path, ...] = ()) -> list[str]:
        """The folders unmounted, the image deleted; the folders in `keep` first copied back off
        the image (by descriptor, bounded: `agentfs.copy_tree`), the rest of the agent's writes
        gone with it. What could not be done, for the record."""
        problems = []
        budget = self.size  # for every kept folder together (each had the image's size once: 4 GiB of a 2 GiB cap)
        if self.home is not None and not self.cap:  # a swept image: its own size says
            with contextlib.suppress(OSError):
                budget = os.lstat(self.home / "disk.img").st_size
        for n, folder in reversed(list(enumerate(self.folders))):
            if _mounted(folder):
                _run_quiet(["umount", str(folder)])
            if _mounted(folder):
                _run_quiet(["umount", "-l", str(folder)])
                if _mounted(folder):
                    problems.append(f"{folder.name} is still mounted")
                    continue
            if folder in keep and self.home is not None:
                try:
                    agentfs.remove(folder)  # what the harness put there before the stay
                    budget -= agentfs.copy_tree(self.home / "mnt" / str(n), folder, budget)
                except agentfs.Unclean as exc:
                    problems.append(f"{folder.name} could not be copied off the image ({exc})")
                    with contextlib.suppress(OSError):
                        agentfs.remove(folder)  # never half a copy
                except OSError as exc:  # its text would carry the agent's file name: only the error's kind
                    problems.append(f"{folder.name} could not be copied off the image ({exc.strerror})")
                    with contextlib.suppress(OSError):
                        agentfs.remove(folder)  # never half a copy
        self.folders = []
        if self.home is not None:
            mnt = self.home / "mnt"
            if _mounted(mnt):
                _run_quiet(["umount", "-l", str(mnt)])
            if not _mounted(mnt):
                with contextlib.suppress(OSError):
                    agentfs.remove(self.home)
            else:
                problems.append(f"the image at {mnt} is still mounted")
            self.home = None
        return problems


def _run_quiet(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


UNOWNED_GRACE_S = 60.0


def _young(home: Path) -> bool:
    try:
        return time.time() - home.lstat().st_mtime < UNOWNED_GRACE_S
    except OSError:
        return False


def sweep(keep=None) -> list[str]:
    """Images a crashed launch left (their owner process is gone): their folders unmounted, the
    image deleted. A parallel launch's images (owner alive) are left alone. What was swept.
    `keep(folder)` says which bound folders are first copied back off the image (a trial whose
    mission finished before its launch died: its collect is pending and reads them).
    Only what the harness itself made is acted on: IMAGES and each image's folder root's own,
    and a folder unmounted only where the kernel's mount table shows it bound from that
    image (never a mount point a listing names: the listing is a file anyone may have written)."""
    if os.geteuid() != 0 or not _root_owned_dir(IMAGES):
        return []
    swept = []
    for home in sorted(IMAGES.iterdir()):
        if not _root_owned_dir(home):
            continue
        try:
            pid, started = (home / "owner").read_text().split()
            if psutil.Process(int(pid)).create_time() == float(started):
                continue  # a launch still running
        except FileNotFoundError:
            if _young(home):
                continue  # a parallel launch between its mkdir and its owner file
        except (OSError, ValueError, psutil.Error):
            pass
        disk = AgentDisk(home.name, 0, home=home)
        binds = _binds_of(home / "mnt")
        disk.folders = [Path(point) for point, _ in sorted(binds.items(), key=lambda item: item[1])]
        disk.release(tuple(f for f in disk.folders if keep is not None and keep(f)))
        swept.append(home.name)
    return swept
