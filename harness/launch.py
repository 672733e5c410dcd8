"""`launch local`: the stage list over one run record, and the loop that runs it.

Preflight → Serve → Wait-ready → Probe → Configure → Smoke → Mission-setup → Run → Collect → Destroy

Each stage is a function `(record, context)`: it reads what earlier stages recorded and
writes its result into the record; what must never be recorded (the key, the log
collector, the mission's services) lives in the context. The loop names the stage a
failure stops at (`stopped_at`), fires the failpoints (their stage list is derived from
this one) and saves after each stage. Destroy is the unit's lifetime ending
(`harness.units`): it runs on every way out.
"""

from __future__ import annotations

import os
import shutil
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness import failpoint
from harness.errors import FatalUnitLog, StackError, UserError
from harness.paths import ProjectPaths
from harness.record import RowKey, RunRecord, Status, Timestamps, utcnow
from harness.sandbox.secrets import scrub_files, scrub_tree, secrets_from
from harness.serving.collect import gpu_cost
from harness.stages import agent, collect, serving
from harness.stages.agent import SmokeFailed
from harness.stages.context import LaunchContext, LaunchOptions, Say
from harness.units import Interrupted, UnitLife, destroy_leftovers, lifetime

__all__ = ["STAGES", "FAILPOINT_STAGES", "Interrupted", "LaunchOptions", "SmokeFailed", "launch_local"]


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
    Stage("collect", collect.collect),
)
# Destroy is the unit's lifetime ending; its failpoint fires in each destroy attempt.
FAILPOINT_STAGES = (*(s.name for s in STAGES if s.failpoint), "destroy")


def new_run_id(preset: str, effort: str) -> str:
    return f"{utcnow():%Y%m%dT%H%M%SZ}-{preset}-{effort}-{uuid.uuid4().hex[:4]}"


class Launch:
    def __init__(self, opts: LaunchOptions, say: Say) -> None:
        run_id = new_run_id(opts.preset, opts.effort)
        paths = ProjectPaths(opts.root).run(run_id)
        self.ctx = LaunchContext(opts=opts, say=say, paths=paths, life=None)
        self.ctx.life = UnitLife(opts.root, say, log_path=paths.unit_log, run_dir=paths.dir,
                                 before_destroy=self.ctx.stop_services)
        self.record = RunRecord(
            run_id=run_id,
            key=RowKey(preset=opts.preset, effort=opts.effort, effort_requested=opts.effort, gpu="unknown"),
            environment=opts.environment, stack="unknown", mission=opts.mission,
            times=Timestamps(launch=utcnow()),
        )
        self.stage = STAGES[0].name

    def save(self) -> None:
        self.record.save(self.ctx.paths.dir)

    def run(self) -> RunRecord:
        ctx, rec = self.ctx, self.record
        ctx.paths.dir.mkdir(parents=True, exist_ok=True)
        self.save()
        with lifetime(ctx.life, raise_destroy_failure=False):
            try:
                self._stages()
            except UserError as exc:  # SmokeFailed included: the model cannot drive the mission
                self._end(Status.refused, exc.render())
            except Interrupted as exc:
                self._end(Status.fault, str(exc))
            except (FatalUnitLog, StackError) as exc:
                self._end(Status.fault, str(exc))
            except Exception as exc:  # a harness bug: keep the traceback next to the record
                ctx.paths.fault.write_text(traceback.format_exc())
                self._end(Status.fault, f"{type(exc).__name__}: {exc} (traceback in fault.txt)")
        self._destroyed()
        if ctx.life.late_signal is not None and rec.status in (Status.ok, Status.void):
            rec.status, rec.stopped_at = Status.fault, "destroy"
            rec.reason = f"interrupted by {ctx.life.late_signal} during destroy (the destroy finished first)"
        rec.times.end = utcnow()
        self.save()
        self._scrub_secrets()  # run.json last: it was written above
        return rec

    def _stages(self) -> None:
        ctx, rec = self.ctx, self.record
        ctx.say(f"run {rec.run_id}")
        destroy_leftovers(ctx.root, ctx.say)
        failpoint.check(FAILPOINT_STAGES)  # a malformed value is refused before anything is served
        for stage in STAGES:
            self.stage = stage.name  # the record's `stopped_at` if this stage ends the launch
            if stage.failpoint == "start":
                failpoint.hit(stage.name)
            stage.run(rec, ctx)
            self.save()
            if stage.failpoint == "end":
                failpoint.hit(stage.name)

    def _end(self, status: Status, reason: str) -> None:
        self.record.status, self.record.reason, self.record.stopped_at = status, reason, self.stage

    def _destroyed(self) -> None:
        """The destroy's outcome on the record: when, GPU-hours, or a failure that may still bill."""
        rec, life = self.record, self.ctx.life
        if life.collector is not None:
            rec.unit_death = life.collector.death
        if life.unit is None:
            return
        if life.destroy_error is not None:
            rec.status, rec.stopped_at = Status.fault, "destroy"
            rec.reason = f"{rec.reason + '; ' if rec.reason else ''}destroy failed: {life.destroy_error} — still in the ledger"
        else:
            rec.times.destroyed = life.destroyed_at
        self._copy_served_log()
        if rec.times.serve_start and rec.times.destroyed:
            hours = (rec.times.destroyed - rec.times.serve_start).total_seconds() / 3600
            rec.gpu_hours = round(hours * (rec.gpus or 0), 4)
            if rec.serving is not None:
                rec.serving.gpu_cost_usd = gpu_cost(rec.gpu_hours, rec.serving.gpu_hourly_usd)

    def _copy_served_log(self) -> None:
        served = self.ctx.life.unit.extra.get("served_log")
        if served and os.path.isfile(served):
            shutil.copy2(served, self.ctx.paths.served_log)
            self.record.artifacts.served_log = str(self.ctx.paths.served_log)

    def _scrub_secrets(self) -> None:
        """The unit's key and the preset's env values out of everything the run left: the run
        folder (run.json last) and the units' logs under .vot/run."""
        ctx = self.ctx
        secrets = secrets_from([ctx.api_key, *(os.environ.get(name) for name in ctx.secret_names)])
        unit_logs = sorted(ProjectPaths(ctx.root).unit_run_dir.glob("*.log"))
        changed, left = scrub_files(unit_logs, secrets)
        in_run, left_in_run = scrub_tree(ctx.paths.dir, secrets)
        changed, left = changed + in_run, left + left_in_run
        if changed:
            ctx.say(f"secrets redacted from {changed} file(s) of the run")
        if left:
            # Named (paths only) on the record; a binary we cannot parse is never rewritten.
            self.record.reason = ((self.record.reason + "; ") if self.record.reason else "") + \
                f"a secret could not be redacted from {', '.join(left)}"
            ctx.say(f"WARNING: a secret remains in {', '.join(left)}")
            self.save()
            scrub_files([ctx.paths.record], secrets)


def launch_local(opts: LaunchOptions, say: Say) -> RunRecord:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return Launch(opts, say).run()
