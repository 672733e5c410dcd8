"""`launch local`: the stage list over one run record, and the loop that runs it.

Preflight → Serve → Wait-ready → Probe → Configure → Smoke → Mission-setup → Run → Destroy → Collect → Post-run

Collect reads what the agent left (opencode's store, the mission's files), so it runs once the
unit is destroyed (harness/launcher/after_destroy.py): nothing the agent left bills GPU time. What it
needs from the live server (the /metrics timeline, the pace, the log) is taken during Run.

With `--trials K` the stages from Configure (less the smoke) run again K−1 times on the same
unit before the destroy, each trial its own record (`record.trial`), each collected after it. With `--capacity` the
agents sweep (harness/stages/capacity.py) then runs on that unit, still before the destroy.

Each stage is a function `(record, context)`: it reads what earlier stages recorded and
writes its result into the record; what must never be recorded (the key, the log
collector, the mission's services) lives in the context. The loop names the stage a
failure stops at (`stopped_at`), fires the failpoints (their stage list is derived from
this one) and saves after each stage. Destroy is the unit's lifetime ending
(`harness.run.units`): it runs on every way out.
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from harness.run import failpoint
from harness.launcher import pending
from harness.launcher.after_destroy import AfterStage, collect_all, mark_pending
from harness.errors import FatalUnitLog, StackError, UserError
from harness.records.paths import ProjectPaths
from harness.records.record import RowKey, RunRecord, SandboxFigures, Status, Timestamps, Trial, utcnow
from harness.sandbox import agentfs
from harness.sandbox.secret_forms import redact_text
from harness.sandbox.secrets import scrub_files, scrub_tree
from harness.escape import one_line
from harness.sandbox.untrusted import escape_name
from harness.serving.collect import gpu_cost
from harness.stages import agent, collect, serving
from harness.stages.agent import SmokeFailed
from harness.stages.capacity import CapacityOptions, run_capacity
from harness.stages.context import LaunchContext, LaunchOptions, Say
from harness.trajectory.launch_hook import record_trajectory
from harness.run.units import Interrupted, UnitLife, destroy_leftovers, lifetime, raise_if_interrupted

__all__ = ["STAGES", "FAILPOINT_STAGES", "TRIAL_STAGES", "Interrupted", "LaunchOptions", "SmokeFailed", "launch_local"]


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[RunRecord, LaunchContext], None]
    # Where a failpoint of this stage fires: as it begins, once it is done (serve: with the
    # unit up, so a fault there must destroy it), or nowhere.
    failpoint: Literal["start", "end"] | None = "start"


STAGES: tuple[Stage, ...] = (
    Stage("preflight", serving.preflight),
    Stage("serve", serving.serve, failpoint="end"),
    Stage("wait-ready", serving.wait_ready),
    Stage("probe", serving.probe),
    Stage("configure", agent.configure),
    Stage("smoke", agent.smoke),
    Stage("mission-setup", agent.mission_setup, failpoint=None),
    Stage("run", agent.run_mission),
)
# After the destroy, on each trial whose stages all ran: what the agent left, read (see above).
AFTER_DESTROY: tuple[AfterStage, ...] = (AfterStage("collect", collect.collect),)
# Destroy is the unit's lifetime ending; its failpoint fires in each destroy attempt.
FAILPOINT_STAGES = (*(s.name for s in STAGES if s.failpoint), "destroy", *(s.name for s in AFTER_DESTROY))


def new_run_id(preset: str, effort: str) -> str:
    return f"{utcnow():%Y%m%dT%H%M%SZ}-{preset}-{effort}-{uuid.uuid4().hex[:4]}"


# What a later trial of `--trials K` runs again, on the unit the first trial served, probed
# and smoked: its own provider file, workspace, opencode data, mission stack, run (and, after
# the destroy, its collect).
TRIAL_STAGES = ("configure", "mission-setup", "run", "collect")


class Launch:
    """One serve, and on it the mission once, or K times (`opts.trials`): each trial its own
    run record and run folder. `record` and `ctx` are the trial running now."""

    def __init__(self, opts: LaunchOptions, say: Say, capacity: CapacityOptions | None = None) -> None:
        self.capacity = capacity  # `--capacity`: the agents sweep on the unit after the trials
        run_id = new_run_id(opts.preset, opts.effort)
        paths = ProjectPaths(opts.root).run(run_id)
        # Names and texts from the agent reach the terminal escaped (a file name may carry OSC 52).
        say = _escaping(say, lambda: self.ctx.secrets() if self.ctx.life is not None else [])
        self.ctx = LaunchContext(opts=opts, say=say, paths=paths, life=None)
        # The unit's log is collected into the first trial's folder for the whole serve; the
        # mission stack stopped before a destroy is the trial's running now.
        self.ctx.life = UnitLife(opts.root, say, log_path=paths.unit_log, run_dir=paths.dir,
                                 before_destroy=lambda: self.ctx.stop_services())
        self.record = RunRecord(
            run_id=run_id,
            key=RowKey(preset=opts.preset, effort=opts.effort, effort_requested=opts.effort, gpu="unknown"),
            environment=opts.environment, stack="unknown", mission=opts.mission,
            times=Timestamps(launch=utcnow()),
            trial=Trial(group=run_id, index=1, of=opts.trials) if opts.trials > 1 else None,
        )
        self.trials: list[tuple[RunRecord, LaunchContext]] = [(self.record, self.ctx)]
        self.due: list[tuple[RunRecord, LaunchContext]] = []  # trials whose stages all ran: collected after the destroy
        self.stopped: tuple[Status, str, str] | None = None  # what ended the launch early (`_end`)
        self.stage = STAGES[0].name

    @property
    def records(self) -> list[RunRecord]:
        return [rec for rec, _ in self.trials]

    def save(self) -> None:
        self.record.save(self.ctx.paths.dir)

    def run(self) -> RunRecord:
        ctx = self.ctx
        ctx.paths.dir.mkdir(parents=True, exist_ok=True)
        self.save()
        with lifetime(ctx.life, raise_destroy_failure=False):
            try:
                self._stages()
                for index in range(2, self.ctx.opts.trials + 1):
                    self._next_trial(index)
                if self.capacity is not None:  # on the same serve, before the destroy
                    self.stage = "capacity"
                    run_capacity(self.capacity, self.trials)
            except UserError as exc:  # SmokeFailed included: the model cannot drive the mission
                self._end(Status.refused, exc.render())
            except Interrupted as exc:
                self._end(Status.fault, str(exc))
            except (FatalUnitLog, StackError) as exc:
                self._end(Status.fault, str(exc))
            except Exception as exc:  # a harness bug: keep the traceback next to the record
                self.ctx.paths.fault.write_text(traceback.format_exc())
                self._end(Status.fault, f"{type(exc).__name__}: {exc} (traceback in fault.txt)")
        self._destroyed()
        collect_all(AFTER_DESTROY, self.due)  # the unit is down: nothing read from here on bills it
        if self.stopped is not None and self.stage == "capacity":  # a stop after its own stages stays its verdict
            self.record.status, self.record.reason, self.record.stopped_at = self.stopped
        self._destroy_outcome()
        rec, life = self.record, self.ctx.life
        if life.late_signal is not None:
            # A signal that arrived during the destroy changes no trial's verdict (issue 61): the
            # destroy finished first, and a trial whose mission finished and was collected is kept
            # as it is, never served again by a resume.
            self.ctx.say(f"{life.late_signal} arrived during the destroy: the destroy finished first; "
                         f"{len(self.trials)} trial(s) keep their verdicts")
        rec.times.end = utcnow()
        peak = launcher_peak_rss_mib()
        for record, trial_ctx in self.trials:
            if record.sandbox is not None:
                record.sandbox.launcher_peak_rss_mib = peak
            _save_pending(record, trial_ctx)
        for record, trial_ctx in self.trials:
            try:
                post_run(record, trial_ctx)  # run.json last: it was written above
                if not (record.status == Status.fault and record.stopped_at == "collect"):
                    pending.discard(record.run_id, trial_ctx.paths.dir)  # collected: nothing is pending
            except Exception as exc:  # noqa: BLE001 - whatever stopped it, the record on disk says void
                why = f"post-run: it could not finish ({type(exc).__name__})"
                record.reason = ((record.reason + "; ") if record.reason else "") + why
                if record.status == Status.ok:
                    record.status, record.stopped_at = Status.void, "post-run"
                self.ctx.say(f"WARNING: {why}")
        for name, value in self.ctx.restore_env.items():  # the preset's own key, back for the user's shell
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return rec

    def _stages(self, index: int = 1) -> None:
        """The stage list (a later trial: only TRIAL_STAGES), each saved, failpoints fired."""
        ctx, rec = self.ctx, self.record
        ctx.say(f"run {rec.run_id}" + (f" (trial {index} of {rec.trial.of})" if rec.trial else ""))
        if index == 1:
            destroy_leftovers(ctx.root, ctx.say)
            pending.sweep_disks(ctx.say)  # a crashed launch's bounded disks
            failpoint.check(FAILPOINT_STAGES, repeated=TRIAL_STAGES, trials=ctx.opts.trials)
        for stage in STAGES:
            if index > 1 and stage.name not in TRIAL_STAGES:
                continue
            self.stage = stage.name  # the record's `stopped_at` if this stage ends the launch
            raise_if_interrupted()  # a signal some library swallowed in the stage before
            if stage.failpoint == "start":
                failpoint.hit(stage.name, index)
            stage.run(rec, ctx)
            self.save()
            if stage.failpoint == "end":
                failpoint.hit(stage.name, index)
        self.due.append((rec, ctx))
        # Its mission finished: what its collect needs is made durable now (issue 61), before the
        # next trial and before the destroy, so a launch killed later never has a resume serve it again.
        try:
            pending.keep(rec, ctx)
        except Exception as exc:  # noqa: BLE001 - never between the unit and its destroy
            ctx.say(f"the pending collect of {rec.run_id} could not be kept: {type(exc).__name__}")

    def _next_trial(self, index: int) -> None:
        """The previous trial's mission is over (its collect, its destroy time and the shared
        GPU-hours come after the destroy); the next one starts on the same unit."""
        self.record.times.end = utcnow()
        mark_pending(self.record)
        self.save()
        first, first_ctx = self.trials[0]
        run_id = new_run_id(self.ctx.opts.preset, self.ctx.opts.effort)
        paths = ProjectPaths(self.ctx.opts.root).run(run_id)
        self.ctx = replace(first_ctx, paths=paths, services=None, drive=None, provider_file=None, argv_base=[],
                           workspace=None, env={}, title="", result=None, report_snapshot=None, untrusted=[], unclean=set(), wire_counts={},
                           wire_decisive=[], stays=[])
        self.record = trial_record(first, run_id, index)
        self.trials.append((self.record, self.ctx))
        paths.dir.mkdir(parents=True, exist_ok=True)
        self.save()
        self._stages(index)

    def _end(self, status: Status, reason: str) -> None:
        self.record.status, self.record.reason, self.record.stopped_at = status, reason, self.stage
        self.stopped = (status, reason, self.stage)

    def _destroyed(self) -> None:
        """Before the collect: when it was destroyed and the GPU-hours, on every trial's record
        (the serve is theirs together); a death of the unit on the trial running then."""
        rec, life = self.record, self.ctx.life
        if life.collector is not None:
            rec.unit_death = life.collector.death
        if life.unit is None:
            return
        self._copy_served_log()
        for record in self.records:
            if life.destroy_error is None:
                record.times.destroyed = life.destroyed_at
            record.create_retries = list(life.unit.extra.get("create_retries") or [])[:50]
            start = billed_from(life.unit, record)
            if start is None:  # the cloud holds no app: the create made nothing, it bills nothing
                record.gpu_hours = 0.0
            elif record.times.destroyed:
                hours = max(0.0, (record.times.destroyed - start).total_seconds()) / 3600
                record.gpu_hours = round(hours * (record.gpus or 0), 4)

    def _destroy_outcome(self) -> None:
        """After the collect (whose verdict it overrides): a failed destroy on the trial running
        then, and each record's GPU cost at its serving section's price."""
        rec, life = self.record, self.ctx.life
        if life.unit is None:
            return
        if life.destroy_error is not None:
            rec.status, rec.stopped_at = Status.fault, "destroy"
            rec.reason = f"{rec.reason + '; ' if rec.reason else ''}destroy failed: {life.destroy_error} — still in the ledger"
        for record in self.records:
            if record.gpu_hours is not None and record.serving is not None:
                record.serving.gpu_cost_usd = gpu_cost(record.gpu_hours, record.serving.gpu_hourly_usd)

    def _copy_served_log(self) -> None:
        """Replay only: what the script served, for the whole serve, into the first trial's folder."""
        first, first_ctx = self.trials[0]
        served = self.ctx.life.unit.extra.get("served_log")
        if served and os.path.isfile(served):
            shutil.copy2(served, first_ctx.paths.served_log)
            first.artifacts.served_log = str(first_ctx.paths.served_log)

def post_run(record: RunRecord, ctx: LaunchContext) -> None:
    """The unit's key and the preset's env values out of everything the run left (the run
    folder, run.json last, and the units' logs under .vot/run), failing closed: an agent
    folder the hand-back or the scrub could not vouch for, or one still holding a secret,
    is removed whole, and the run is void with the reason; never ok with a key left."""
    secrets = ctx.secrets()
    problems: list[str] = []
    remove: set[Path] = set()
    changed, left = 0, []
    for stay in ctx.stays:  # the workspace and the store kept (an unclean one is removed below)
        keep = tuple(f for f in (ctx.paths.workspace, ctx.paths.opencode_home) if f not in ctx.unclean)
        problems += [f"the agent's disk image: {p}" for p in stay.release_image(keep)]
    ctx.stays.clear()
    for path in sorted(ctx.unclean):  # walked by nothing else: no scrub could vouch for it
        problems += _remove(path, ctx)
    record_trajectory(record, ctx.paths.dir, ctx.say, secrets)  # before the scrub, which then covers it
    deadline = time.monotonic() + POSTRUN_SCRUB_S
    try:
        changed, left = scrub_files(sorted(ProjectPaths(ctx.root).unit_run_dir.glob("*.log")), secrets)
        in_run, left_in_run = scrub_tree(ctx.paths.dir, secrets, deadline=deadline)
        changed, left = changed + in_run, left + left_in_run
    except Exception as exc:  # noqa: BLE001 - whatever stopped it, the run fails closed
        problems.append(f"the post-run scrub could not finish ({_why(exc)})")
        for path in ctx.agent_folders():  # then the harness's own files, bounded by their caps
            if os.path.lexists(path):
                problems += _remove(path, ctx)
        try:
            in_run, left = scrub_tree(ctx.paths.dir, secrets)
            changed += in_run
        except Exception as again:  # noqa: BLE001
            problems.append(f"the run folder's scrub could not finish ({_why(again)})")
    for rel in left:  # relative to the run folder (a unit log: absolute)
        path = ctx.paths.dir / rel
        remove.add(next((f for f in ctx.agent_folders() if path == f or f in path.parents), path))
    if left:
        shown = ", ".join(escape_name(p) for p in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        problems.append(f"a secret could not be redacted from {shown}")
    for path in sorted(remove):
        problems += _remove(path, ctx)
    if changed:
        ctx.say(f"secrets redacted from {changed} file(s) of run {record.run_id}")
    if problems:
        why = redact_text("post-run: " + "; ".join(problems), secrets)
        ctx.say(f"WARNING: {why}")
        record.reason = ((record.reason + "; ") if record.reason else "") + why
        if record.status == Status.ok:
            record.status, record.stopped_at = Status.void, "post-run"
    record.reason = redact_text(record.reason, secrets)
    record.save(ctx.paths.dir)  # the record as the post-run leaves it (on disk it said void till now)
    scrub_files([ctx.paths.record], secrets)


def _remove(path: Path, ctx: LaunchContext) -> list[str]:
    """An agent folder (or a file) the post-run cannot vouch for, removed whole: what to say of it."""
    name = escape_name(os.path.relpath(path, ctx.paths.dir))
    try:
        agentfs.remove(path)
    except OSError as exc:
        return [f"{name} could not be removed ({exc.strerror})"]
    return [f"{name} removed"]


POSTRUN_SCRUB_S = 300.0  # the post-run's scrub of one run folder: past it, fail closed (100,000 files once took 349 s)


def _why(exc: BaseException) -> str:
    """An error as a reason may hold it: an OSError's text names the agent's file (the raw key
    in a name), so only its kind; the harness's own (Unclean) messages escape what they name."""
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, agentfs.Unclean):
        return escape_name(str(exc))
    return type(exc).__name__


def _save_pending(record: RunRecord, ctx: LaunchContext) -> None:
    """The record saved as void until its post-run vouches for it: a post-run (or a save) that
    fails leaves void on disk, never ok (a non-UTF-8 name once crashed it with `ok` saved)."""
    status, stopped_at, reason = record.status, record.stopped_at, record.reason
    if status == Status.ok:
        record.status, record.stopped_at = Status.void, "post-run"
        record.reason = "the post-run did not finish"
    try:
        record.save(ctx.paths.dir)
    finally:
        record.status, record.stopped_at, record.reason = status, stopped_at, reason


def billed_from(unit, record: RunRecord):
    """When the serve began to bill (issue 61): the cloud's own creation time where the stack reads
    one (Azure's systemData.createdAt, read at the destroy), never the request's (a create retried
    for a minute bills from the app's creation); None where the cloud held no app at the destroy
    (a create that made nothing); else the serve's start (a local process bills from its start)."""
    from datetime import datetime

    extra = unit.extra if unit is not None else {}
    if extra.get("cloud_absent"):
        return None
    if extra.get("cloud_created_at"):
        try:
            return datetime.fromisoformat(str(extra["cloud_created_at"]))
        except ValueError:
            pass
    return record.times.serve_start


def launcher_peak_rss_mib() -> float:
    """This process's peak resident memory so far (the wire tap's buffers live here)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (1 << 20 if os.uname().sysname == "Darwin" else 1 << 10), 1)


def _escaping(say: Say, secrets: Callable[[], list[str]]) -> Say:
    """Every line for the terminal: each form of a secret redacted (an error naming a file named
    after the key), every control character escaped, newline included: one message, one line
    (a name or an error with a newline in it would forge a line, issue 60)."""
    return lambda message: say(one_line(redact_text(message, secrets())))


def trial_record(first: RunRecord, run_id: str, index: int) -> RunRecord:
    """A later trial's record: what the first trial's serve, probe and smoke established, carried
    over as it is (the unit, engine, speeds, the smoke's verdict); everything the mission
    measures starts empty."""
    t = first.times
    return RunRecord(
        run_id=run_id, key=first.key.model_copy(), environment=first.environment, stack=first.stack,
        mission=first.mission, scripted=first.scripted, gpus=first.gpus, unit=first.unit, api_key=first.api_key,
        served_name=first.served_name, model=first.model, max_model_len=first.max_model_len,
        preset_sha256=first.preset_sha256, mission_sha256=first.mission_sha256,
        serving_config=dict(first.serving_config), engine=first.engine, probe=first.probe, smoke=first.smoke,
        versions=dict(first.versions),
        sandbox=SandboxFigures(kind=first.sandbox.kind, privilege=first.sandbox.privilege,
                               agent_user=first.sandbox.agent_user) if first.sandbox else None,
        times=Timestamps(launch=utcnow(), serve_start=t.serve_start, ready=t.ready, probed=t.probed, smoked=t.smoked),
        trial=Trial(group=first.trial.group, index=index, of=first.trial.of),
    )


def launch_local(opts: LaunchOptions, say: Say) -> list[RunRecord]:
    """The launch's run records: one, or one per trial that started (`opts.trials`)."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    launch = Launch(opts, say)
    launch.run()
    return launch.records
