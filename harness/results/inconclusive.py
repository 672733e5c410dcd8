"""`llms-benchmark inconclusive RUN`: a run that made no row (void, refused, fault) becomes an
entry of `.llms-benchmark/non-conclusive.yaml` — preset, environment, date and its recorded
reason — and its folder leaves `runs/` for `.llms-benchmark/inconclusive/` (ignored by git), so
an honest negative reaches the results page and `git status` shows only the entry.

The entry is appended as text: the file's comments and earlier entries are kept byte for byte.
A run already entered is not entered twice (its run id is in the reason). Refused (exit 2, nothing
written or moved): an ok run (it makes a row), a run still going, a scripted trajectory (a replay
preset says nothing of a model: "scripted trajectory: no row", whatever its status, a preflight
refusal included), and a run whose folder holds files git tracks (a committed run: moving it would
delete them from the checkout). The entry's reason never carries a host path: the checkout's and
the home folder's are taken out of the record's reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status

REASON_MAX = 600  # characters of the record's reason kept in the one-line cell
SCRIPTED_STACK = "replay"  # the stack that plays a scripted trajectory (harness/stacks/replay.py)
NO_ROW_SCRIPTED = "scripted trajectory: no row"  # what a scripted run ends in: neither a row nor an entry
GIT_TIMEOUT_S = 20.0


@dataclass
class Entered:
    entry: dict[str, str]
    record: Path  # where the record now lies
    added: bool  # False: the run was entered already


def find_record(root: Path, run_id: str) -> Path:
    """The record of RUN under runs/, refused/ or inconclusive/ (never a path: a name)."""
    paths = ProjectPaths(root)
    if not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
        raise UserError(f"{run_id[:120]!r} is not a run id", field="RUN", fix="pass the run id `launch` printed")
    for folder in (paths.runs, paths.refused, paths.inconclusive):
        record = folder / run_id / "run.json"
        if record.is_file():
            return record
    raise UserError(f"no run {run_id!r} under runs/, refused/ or inconclusive/", file=paths.runs, field="RUN",
                    fix="pass the run id `launch` printed (`llms-benchmark wait RUN` names its record)")


def is_scripted(root: Path, record: RunRecord) -> bool:
    """Whether the run played a scripted trajectory, not a model. The record says so once the unit
    was served (`scripted`); a launch refused before that has its stack from the preflight, or not
    even that: then its environment's file decides (the replay stack plays a script)."""
    if record.scripted or record.stack == SCRIPTED_STACK:
        return True
    if record.stack not in ("", "unknown"):
        return False
    try:
        from harness.vot.environment import load_environment

        return load_environment(Path(root), record.environment).stack == SCRIPTED_STACK
    except (UserError, OSError, ValueError):
        return False


def without_host_paths(text: str, root: Path) -> str:
    """`text` with the checkout's path made relative and the home folder's written `~`: a reason
    the harness wrote names files by their absolute path, which says nothing on another machine
    and names the user's folders in a committed file."""
    def swap(text: str, base: str, inside: str, itself: str) -> str:
        if len(base) <= 1:
            return text
        text = text.replace(base + "/", inside)
        return re.sub(re.escape(base) + r"(?![\w~-]|\.\w)", lambda _: itself, text)  # never a longer name's prefix

    for base in sorted({str(Path(root)), str(Path(root).resolve())}, key=len, reverse=True):
        text = swap(text, base, "", ".")
    return swap(text, str(Path.home()), "~/", "~")


def tracked_files(root: Path, folder: Path) -> list[str]:
    """The files under `folder` git tracks in the checkout at `root` (at most a few named; [] when
    the root is no git checkout or git cannot say)."""
    try:
        rel = folder.resolve().relative_to(Path(root).resolve())
    except ValueError:
        return []
    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", f"{rel.as_posix()}/"],
                              capture_output=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [name for name in done.stdout.decode(errors="replace").split("\0")[:5] if name]


def entry_for(record: RunRecord, root: Path | None = None) -> dict[str, str]:
    """The non-conclusive entry a run's record gives: one line, no '|' (a table cell), no host path."""
    reason = record.reason or "no reason recorded"
    if root is not None:
        reason = without_host_paths(reason, root)
    reason = " ".join(reason.split()).replace("|", "/")
    if len(reason) > REASON_MAX:
        reason = reason[:REASON_MAX - 1] + "…"
    where = f" at {record.stopped_at}" if record.stopped_at else ""
    return {"preset": record.key.preset, "environment": record.environment,
            "date": record.times.launch.date().isoformat(),
            "reason": f"{record.mission} mission, {record.status.value}{where} (run {record.run_id}): {reason}"}


def enter(root: Path, run_id: str) -> Entered:
    """Enter RUN as non-conclusive and move its folder out of runs/. Refuses an ok run (it makes a
    row), a run still going (no end time), a scripted replay (never a result) and a committed run
    (files of its folder tracked by git)."""
    from harness.results.rows import load_non_conclusive

    root = Path(root)
    paths = ProjectPaths(root)
    path = find_record(root, run_id)
    try:
        record = RunRecord.load(path)
    except (ValueError, OSError) as exc:
        raise UserError(f"the run record does not read: {str(exc).splitlines()[0][:200]}", file=path,
                        fix="a record the harness wrote, unedited") from None
    if record.status == Status.ok:
        raise UserError(f"run {run_id} is ok: it makes a row, not a non-conclusive entry", file=path, field="status",
                        fix="rule it and render it (the slash command's steps 3-5)")
    if record.times.end is None:
        raise UserError(f"run {run_id} has not ended", file=path, field="times.end",
                        fix=f"wait for it first: `llms-benchmark wait {run_id}`")
    if is_scripted(root, record):
        raise UserError(f"run {run_id} played a scripted trajectory, not a model: it says nothing of a preset "
                        f"({NO_ROW_SCRIPTED}, and no non-conclusive entry)", file=path, field="scripted",
                        fix="nothing to enter: report the run as a scripted check and stop; "
                            "enter only runs of a real model")
    tracked = tracked_files(root, path.parent)
    if tracked:
        raise UserError(f"run {run_id} is committed: git tracks {', '.join(tracked[:3])}"
                        + (" and more" if len(tracked) > 3 else "") + "; entering it would move them out of the "
                        "checkout", file=path, field="RUN",
                        fix="a committed run stays where it is (its row or entry is in git already); enter only "
                            "a run that just ended, whose folder git does not track")
    entry = entry_for(record, root)
    listed = load_non_conclusive(root)  # the file as it is must read (else: named, nothing written)
    added = not any(f"(run {run_id})" in e.reason for e in listed)
    if added:
        target = paths.non_conclusive
        text = target.read_text(encoding="utf-8") if target.is_file() else (
            "# Presets tried that could yield no row, and why: preset, environment, date (YYYY-MM-DD), reason.\n")
        if text and not text.endswith("\n"):
            text += "\n"
        block = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=10**6)
        if text.strip() in ("[]", ""):
            text = ""
        write_atomic(target, text + block)
        load_non_conclusive(root)  # what was written reads back (a check, never a half-written file)
    if path.parent.parent == paths.runs:
        paths.inconclusive.mkdir(parents=True, exist_ok=True)
        dest = paths.inconclusive / run_id
        shutil.move(str(path.parent), str(dest))
        path = dest / "run.json"
    return Entered(entry, path, added)
