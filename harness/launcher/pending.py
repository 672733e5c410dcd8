"""A trial whose mission finished is durable before the destroy (issue 61).

The collect reads what the agent left, so it runs after the destroy (no unit bills while the
harness reads a hostile store). A launch killed in between — on Azure a destroy takes minutes —
used to leave that trial a fault, and a matrix's resume served it again: the GPU paid twice for
one trial. Now, before the destroy starts, each trial whose stages all ran leaves on disk what
its collect needs that lived only in the launch's memory:

- `collect-pending.json` in its run folder (harness-owned, no secret): opencode's run result
  (session id, how it ended), the report as it stood at the harness's stop, the drive's tag
  key and windows, the agent's environment names and paths;
- the values the post-run must scrub (the per-launch key, the preset's secrets) in a 0600 file
  of the machine's cache, outside the project, removed once the collect has run.

`complete(root, run_id)` then runs that trial's collect and post-run on a later command (a
matrix's resume, `llms-benchmark collect RUN_ID`) without serving anything: the unit is gone,
its record says so. A trial whose folders did not survive (a root launch's disk image swept)
is collected as what is left: void, its reason saying why.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.paths import RunPaths
from harness.records.record import COLLECT_PENDING, RunRecord, Status, utcnow

PENDING_FILE = "collect-pending.json"  # RunPaths.collect_pending
_KEPT_ENV = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR")


def secrets_dir() -> Path:
    base = os.environ.get("LLMS_BENCHMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "llms-benchmark")
    return Path(base) / "pending-secrets"


def _secrets_path(run_id: str) -> Path:
    return secrets_dir() / f"{run_id}.json"


def keep(record: RunRecord, ctx) -> None:
    """Before the destroy: what a later collect of this trial needs, on disk; the record says its
    collect is pending (as it would after the destroy)."""
    from harness.launcher.after_destroy import mark_pending

    run_dir = ctx.paths.dir
    result = dataclasses.asdict(ctx.result) if ctx.result is not None else None
    drive = None
    if ctx.drive is not None:
        try:
            drive = {"key": ctx.drive.key, "windows": ctx.drive.windows()}
        except Exception:  # noqa: BLE001 - a drive server that cannot say: the phases come from the time
            drive = None
    data = {
        "result": result,
        "report_snapshot": base64.b64encode(ctx.report_snapshot).decode() if ctx.report_snapshot else None,
        "drive": drive,
        "env": {k: ctx.env[k] for k in _KEPT_ENV if k in ctx.env},
        "workspace": os.path.relpath(ctx.workspace, run_dir) if ctx.workspace is not None else None,
        # The agent's folders its collect reads, and those no hand-back vouched for (removed whole):
        # a crash leaves them on a root launch's disk image, which the next sweep copies back.
        "kept": [f.name for f in (ctx.paths.workspace, ctx.paths.opencode_home) if f not in ctx.unclean],
        "unclean": sorted(os.path.relpath(f, run_dir) for f in ctx.unclean
                          if Path(f).is_relative_to(run_dir)),
    }
    write_atomic(run_dir / PENDING_FILE, json.dumps(data, default=str))
    folder = secrets_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = _secrets_path(record.run_id)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"secrets": [s for s in ctx.secrets() if s]}, f)
    status = (record.status, record.stopped_at, record.reason)
    mark_pending(record)
    try:
        record.save(run_dir)
    finally:
        record.status, record.stopped_at, record.reason = status


def _read_pending(run_dir: Path) -> dict | None:
    """The pending file of a run folder, read without following a link, bounded; None if absent."""
    try:
        fd = os.open(Path(run_dir) / PENDING_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(4_000_000))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def kept_folder(folder: Path) -> bool:
    """For `diskimage.sweep`: a folder a pending collect reads (its run folder says so)."""
    data = _read_pending(Path(folder).parent)
    return data is not None and Path(folder).name in (data.get("kept") or [])


def sweep_disks(say=print) -> None:
    """A crashed launch's disk images released; a pending collect's folders copied back first."""
    from harness.sandbox import diskimage

    for name in diskimage.sweep(keep=kept_folder):
        say(f"swept a leftover agent disk image: {name}")


def discard(run_id: str, run_dir: Path) -> None:
    """The collect ran: nothing of it is kept."""
    for path in (Path(run_dir) / PENDING_FILE, _secrets_path(run_id)):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def is_pending(run_dir: Path) -> bool:
    return (Path(run_dir) / PENDING_FILE).is_file()


def complete(root: Path, run_id: str, say=print) -> RunRecord:
    """The pending collect of run `run_id`, run now: nothing is served. UserError when the run
    has no pending collect or its unit is not down yet."""
    from harness.launcher.after_destroy import collect_all
    from harness.launcher.launch import AFTER_DESTROY, post_run
    from harness.mission import load_mission
    from harness.opencode.runner import RunResult
    from harness.run.units import Ledger
    from harness.stages.context import LaunchContext, LaunchOptions
    from harness.vot.environment import load_environment

    paths = RunPaths(Path(root) / ".llms-benchmark" / "runs" / run_id)
    if "/" in run_id or run_id in ("", ".", "..") or not paths.record.is_file():
        raise UserError(f"no run '{run_id}'", fix="pass a run id from .llms-benchmark/runs/")
    pending = paths.dir / PENDING_FILE
    record = RunRecord.load(paths.record)
    if not pending.is_file() or record.reason != COLLECT_PENDING:
        raise UserError(f"run {run_id} has no collect pending", file=paths.record,
                        fix="only a trial whose launch died after its mission and before its collect has one")
    if record.times.destroyed is None and record.unit and Ledger(Path(root)).get(record.environment, record.unit):
        raise UserError(f"run {run_id}'s unit {record.unit} is still in the ledger", file=paths.record,
                        fix="its launch is still running, or left it: any command sweeps a dead launch's unit first")
    sweep_disks(say)  # its folders, if a crash left them on a disk image, copied back first
    try:
        data = _read_pending(paths.dir)
        if data is None:
            raise ValueError("not a JSON object")
        secrets = json.loads(_secrets_path(run_id).read_text())["secrets"]
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"run {run_id}'s pending collect cannot be read ({exc})", file=pending,
                        fix="the trial cannot be collected: launch it again") from None
    opts = LaunchOptions(root=Path(root), environment=record.environment, preset=record.key.preset,
                         effort=record.key.effort_requested, mission=record.mission)
    ctx = LaunchContext(opts=opts, say=say, paths=paths, life=SimpleNamespace(api_key=None, unit=None))
    ctx.pf = SimpleNamespace(mission=load_mission(Path(root), record.mission),
                             env=load_environment(Path(root), record.environment))
    ctx.secret_values = list(secrets)
    ctx.result = RunResult(**data["result"]) if data.get("result") else None
    ctx.report_snapshot = base64.b64decode(data["report_snapshot"]) if data.get("report_snapshot") else None
    if data.get("drive"):
        windows = data["drive"].get("windows")
        ctx.drive = SimpleNamespace(key=data["drive"].get("key"), windows=lambda w=windows: w)
    ctx.env = dict(data.get("env") or {})
    if data.get("workspace"):
        ctx.workspace = paths.dir / data["workspace"]
    for rel in data.get("unclean") or []:  # removed whole by the post-run, as the launch would have
        path = (paths.dir / str(rel))
        if ".." not in Path(str(rel)).parts and not Path(str(rel)).is_absolute():
            ctx.unclean.add(path)
    collect_all(AFTER_DESTROY, [(record, ctx)])
    if ctx.workspace is not None and not ctx.workspace.exists() and record.status == Status.ok:
        record.status, record.stopped_at = Status.void, "collect"
        record.reason = "collected after its launch died: the agent's folders did not survive it"
    post_run(record, ctx)
    if record.times.end is None:  # the launch never wrote its end: the record ends with its collect
        record.times.end = record.times.collected or utcnow()
    record.save(paths.dir)
    discard(run_id, paths.dir)
    say(f"run {run_id}: collected after its launch died ({record.status.value})")
    return record
