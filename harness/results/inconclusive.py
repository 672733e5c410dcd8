"""`llms-benchmark inconclusive RUN`: a run that made no row (void, refused, fault) becomes an
entry of `.llms-benchmark/non-conclusive.yaml` — preset, environment, date and its recorded
reason — and its folder leaves `runs/` for `.llms-benchmark/inconclusive/` (ignored by git), so
an honest negative reaches the results page and `git status` shows only the entry.

The entry is appended as text: the file's comments and earlier entries are kept byte for byte.
A run already entered is not entered twice (its run id is in the reason).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status

REASON_MAX = 600  # characters of the record's reason kept in the one-line cell


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


def entry_for(record: RunRecord) -> dict[str, str]:
    """The non-conclusive entry a run's record gives: one line, no '|' (a table cell)."""
    reason = " ".join((record.reason or "no reason recorded").split()).replace("|", "/")
    if len(reason) > REASON_MAX:
        reason = reason[:REASON_MAX - 1] + "…"
    where = f" at {record.stopped_at}" if record.stopped_at else ""
    return {"preset": record.key.preset, "environment": record.environment,
            "date": record.times.launch.date().isoformat(),
            "reason": f"{record.mission} mission, {record.status.value}{where} (run {record.run_id}): {reason}"}


def enter(root: Path, run_id: str) -> Entered:
    """Enter RUN as non-conclusive and move its folder out of runs/. Refuses an ok run (it makes a
    row), a run still going (no end time) and a scripted replay (never a result)."""
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
    if record.scripted:
        raise UserError(f"run {run_id} served a scripted trajectory, not a model: it says nothing of a preset",
                        file=path, field="scripted", fix="enter only runs of a real model")
    entry = entry_for(record)
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
