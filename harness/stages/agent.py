"""The stages that run opencode: configure, smoke, mission-setup, run."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from harness.sandbox import toolshell, untrusted
from harness.errors import UserError
from harness.load.metrics import generated_tokens, running_requests
from harness.mission import prepare_workspace
from harness.mission_services import merge_env, start_services
from harness.opencode import config as oc_config
from harness.opencode.runner import Limits, run_opencode
from harness.records.record import RunOutcome, RunRecord, utcnow
from harness.sandbox.wirelog import WIRE_LOG
from harness.serving.pace import PaceMonitor
from harness.serving.retune import Retuner
from harness.serving.timeline import Sampler
from harness.stages.context import TOOL_SHELL, LaunchContext
from harness.stages.report_stop import ENDED_PREFIX, ReportStop
from harness.verdicts.findings import collect as collect_findings

SMOKE_PROMPT = "run the shell command date and reply with its output"
SMOKE_LIMITS = Limits(time_cap_s=10 * 60, stall_s=5 * 60)


class SmokeFailed(UserError):
    pass


# A parser's symptom: the model wrote a call as text (Hermes tags, or a JSON object naming a
# tool and its arguments) that no parser turned into a tool_use. Bounded: one pass, no nesting.
_CALL_AS_TEXT = re.compile(r"<tool_call>|<function[=>]|\{\s*\"name\"\s*:\s*\"[^\"]{1,64}\"\s*,\s*\"(?:arguments|parameters)\"")


def paced(limits: Limits, ctx: LaunchContext) -> Limits:
    """The stall limit follows the probed pace: never shorter than 1.5x opencode's first turn
    at that pace (harness/stages/serving.py), so a slow box is not read as a stalled model."""
    floor = ctx.stall_floor_s or 0.0
    if floor <= limits.stall_s:
        return limits
    return replace(limits, stall_s=min(floor, limits.time_cap_s))


def pace_monitor(rec: RunRecord, ctx: LaunchContext, on_reading=None, timeline: Path | None = None) -> PaceMonitor:
    """The server's pace while opencode runs (what a stall's reason says; the mission's also
    on its timeline, with the threads serving)."""
    unit, stack = ctx.unit, ctx.pf.stack
    own_log = Path(unit.log_path) if unit.log_path else None
    log = own_log if own_log is not None and own_log.is_file() else ctx.paths.unit_log

    def threads() -> int | None:
        now = getattr(stack, "threads_now", None)
        return now.threads if now is not None else None

    return PaceMonitor(unit.base_url, api_key=ctx.api_key, log_path=log, probe=rec.probe,
                       reference=ctx.pace_reference, server_pid=lambda: unit.pid, on_reading=on_reading,
                       timeline=timeline, threads=threads)


def _smoke_fix(result, slow: bool) -> tuple[str, str]:
    """(what failed, the fix), from what the run shows: a parser is blamed only on a parser's symptom."""
    text = "\n".join(result.texts)[:200_000]
    if slow:
        return ("the smoke could not finish: the machine is too busy or too slow for this preset",
                "free the machine (stop other CPU-bound processes) or serve a smaller preset, then launch again")
    if _CALL_AS_TEXT.search(text):
        return ("the served model failed the smoke: it wrote a tool call as text that no parser turned into a call",
                "serve the model with a working tool-call parser (and a tool-capable chat template)")
    if result.texts:
        return ("the served model failed the smoke: it answered in prose, with no tool call",
                "serve a model (or chat template) that calls tools; a model that answers in prose cannot "
                "drive the mission")
    return ("the served model failed the smoke",
            "read the smoke's events and the unit log; serve a model that calls tools")


def configure(rec: RunRecord, ctx: LaunchContext) -> None:
    pf, unit = ctx.pf, ctx.unit
    shell = None
    if ctx.sandbox.kind == "bwrap":
        # The agent's tools in a Landlock domain of their own: none can reach opencode's memory,
        # descriptors or signals (issue 60; sandbox/toolshell.py).
        shell = ctx.paths.provider_file.with_name(TOOL_SHELL)
        shell.parent.mkdir(parents=True, exist_ok=True)
        shell.write_text(toolshell.script(os.path.realpath(sys.executable)))
        shell.chmod(0o755)
    provider = oc_config.provider_config(unit, reasoning_parser=pf.preset.reasoning_parser,
                                         steps=pf.mission.manifest.agent_steps,
                                         disabled_tools=pf.mission.manifest.disabled_tools,
                                         shell=str(shell) if shell else None)
    ctx.provider_file = oc_config.write_provider_file(provider, ctx.paths.provider_file)
    rec.artifacts.provider_file = str(ctx.provider_file)
    variant = oc_config.applied_effort(provider, unit.served_name, ctx.opts.effort)
    rec.key.effort = variant or "default"
    ctx.argv_base = [str(pf.opencode), "run", "--model", f"vot/{unit.served_name}",
                     *(["--variant", variant] if variant else []), "--format", "json", "--auto",
                     "--print-logs", "--log-level", "INFO"]


def smoke(rec: RunRecord, ctx: LaunchContext) -> None:
    """One bash tool call through opencode: a model that answers in prose cannot drive the mission.
    It runs in the mission's very workspace folder so that opencode's system prompt (which names
    the working directory, ahead of the tool list) is the mission's: the server's prompt cache
    then holds the mission's first ~7k tokens."""
    unit, smoke_dir = ctx.unit, ctx.paths.smoke
    scratch = prepare_workspace(ctx.pf.mission, ctx.paths.workspace)
    smoke_dir.mkdir(parents=True, exist_ok=True)
    env = ctx.agent_env(smoke_dir / "opencode")
    ctx.say("smoke: asking for one bash tool call through opencode")
    before = generated_tokens(unit.base_url, api_key=ctx.api_key)
    pace = pace_monitor(rec, ctx).start()
    diagnoses = []

    def explain(window_s: float) -> str:
        diagnoses.append(pace.explain(window_s))
        return diagnoses[-1].text

    try:
        with ctx.confined(rec, scratch, smoke_dir / "opencode", [unit.base_url], smoke_dir / WIRE_LOG) as box:
            argv = box.argv([*ctx.argv_base, "--title", "llms-benchmark smoke"], smoke_dir)
            result = run_opencode(argv, prompt=SMOKE_PROMPT, env=env,
                                  cwd=scratch, events_path=smoke_dir / "events.jsonl",
                                  stderr_path=smoke_dir / "stderr.log", limits=paced(SMOKE_LIMITS, ctx),
                                  abort=ctx.collector.problem, abort_reason=ctx.collector.reason, guards=[box.disk],
                                  explain_stall=explain)
    finally:
        pace.stop()
    ctx.collector.raise_if_problem()
    has_bash, has_text = "bash" in result.tool_uses, bool(result.texts)
    if has_bash and has_text:
        rec.smoke = "passed: a bash tool_use event and a text event"
        ctx.say("smoke passed")
        rec.times.smoked = utcnow()
        return
    missing = " and ".join(name for name, ok in (("bash tool_use event", has_bash), ("text event", has_text))
                           if not ok)
    how = result.ended_by or f"opencode exited {result.exit_code}"
    after = generated_tokens(unit.base_url, api_key=ctx.api_key)
    if before is not None and after is not None:
        # Evidence from the server itself: a model streaming prose without end finishes no part.
        how += f"; the server generated {after - before:,.0f} tokens meanwhile"
    used = ", ".join(result.tool_uses) or "none"
    rec.smoke = f"failed: no {missing}; {how}; tools used: {used}"
    what, fix = _smoke_fix(result, slow=any(d.box_too_slow for d in diagnoses))
    raise SmokeFailed(f"{what}: {rec.smoke}", file=smoke_dir / "events.jsonl", fix=fix)


def mission_setup(rec: RunRecord, ctx: LaunchContext) -> None:
    """A fresh workspace copy (the smoke's is gone), an empty TMPDIR, the mission's services."""
    mission, paths = ctx.pf.mission, ctx.paths
    ctx.workspace = prepare_workspace(mission, paths.workspace)
    shutil.rmtree(paths.agent_tmp, ignore_errors=True)
    paths.agent_tmp.mkdir()
    rec.artifacts.workspace = str(ctx.workspace)
    ctx.services = start_services(mission, ctx.workspace, paths.dir)
    ctx.env = merge_env(ctx.agent_env(paths.opencode_home), ctx.services)
    from harness.telemetry.claims import ENV, load_vocabulary

    vocabulary = load_vocabulary(mission.dir)  # `obs finding add` checks --kind/--direction/--scope against it
    if vocabulary is not None:
        ctx.env[ENV] = vocabulary.as_env()
    ctx.title = f"llms-benchmark {ctx.pf.preset.name}"
    rec.artifacts.opencode_events = str(paths.opencode_events)
    rec.artifacts.opencode_stderr = str(paths.opencode_stderr)
    rec.times.mission_start = utcnow()
    ctx.say(f"running the '{mission.name}' mission with opencode (cap {mission.manifest.time_cap_minutes:g} min)")


def run_mission(rec: RunRecord, ctx: LaunchContext) -> None:
    mission, paths, unit, workspace = ctx.pf.mission, ctx.paths, ctx.unit, ctx.workspace
    limits = paced(Limits(time_cap_s=mission.manifest.time_cap_minutes * 60,
                          stall_s=mission.manifest.stall_minutes * 60), ctx)
    with ctx.confined(rec, workspace, paths.opencode_home, [unit.base_url, *ctx.env.values()],
                      paths.wire_log) as box:
        argv = box.argv([*ctx.argv_base, "--title", ctx.title], paths.dir)
        # The serving timeline covers opencode's run and nothing else.
        sampler = Sampler(unit.base_url, paths.serving_timeline, api_key=ctx.api_key).start()
        rec.artifacts.serving_timeline = str(sampler.path)
        # The server's pace: a stall's cause, and (llama.cpp) threads chosen again if the box changes.
        # Going down mid-request, the bridge cuts the call in flight (opencode sends it again).
        retuner = Retuner(ctx.pf.stack, unit, ctx.pf.env, ctx.pf.preset, ctx.say, net=box.net,
                          running=lambda: running_requests(unit.base_url, api_key=ctx.api_key)) \
            if hasattr(ctx.pf.stack, "retune") else None
        pace = pace_monitor(rec, ctx, on_reading=retuner, timeline=paths.pace_timeline)
        rec.artifacts.pace_timeline = str(paths.pace_timeline)
        if retuner is not None:
            retuner.pace = pace
        pace.start()
        stop = ReportStop(workspace, mission.manifest.report, paths.stop_request, ctx.opts.stop_after_report)

        def on_event(event: dict) -> None:
            sampler.on_event(event)
            stop.on_event(event)

        try:
            result = ctx.result = run_opencode(
                argv, prompt=mission.prompt_text, env=ctx.env, cwd=workspace, events_path=paths.opencode_events,
                stderr_path=paths.opencode_stderr, limits=limits, abort=ctx.collector.problem,
                abort_reason=ctx.collector.reason, on_event=on_event, guards=[box.disk, stop],
                explain_stall=lambda window_s: pace.explain(window_s).text)
        finally:
            pace.stop()
            sampler.stop()
    if retuner is not None and retuner.done:
        rec.serving_config["threads_retuned"] = [f"{r['threads']}: {r['why']}" for r in retuner.done]
    rec.times.mission_end = utcnow()
    rec.sandbox.denials, rec.sandbox.denied = box.denials(paths.opencode_events)
    ctx.stop_services()  # services flush their telemetry on the way down
    # Only the harness's own stop counts: an `ended_by` that merely reads the same is not it.
    stopped = stop.how if stop.how is not None and result.ended_by == stop.how else None
    if stop.ignored_request and stopped is None:
        ctx.say("stop: asked for, but no report was ever persisted: the run went on to its end")
    # The report and the findings are read by the collect, after the destroy (what the agent
    # left never bills the unit); the report as it stood at the harness's stop is kept here.
    ctx.report_snapshot = stop.snapshot if stopped else None
    rec.run = RunOutcome(exit_code=result.exit_code, ended_by=result.ended_by, events=result.events,
                         stopped_after_report=stopped.split(": ", 1)[1] if stopped else None, pace=pace.fall())


def collect_outputs(rec: RunRecord, ctx: LaunchContext) -> None:
    """What the agent handed in, copied out after the destroy: its report (or the snapshot
    taken at the harness's stop) and findings.json (`obs finding`), never via a link."""
    found = _collect_report(rec, ctx, ctx.pf.mission.manifest.report, ctx.report_snapshot)
    collect_findings(ctx.workspace, ctx.paths.dir, ctx.untrusted)
    rec.run.report_found, rec.run.report_sha256 = found, _sha256(ctx.paths.report) if found else None
    if rec.run.stopped_after_report:
        ctx.say(f"{ENDED_PREFIX}: {rec.run.stopped_after_report}; the report as it stood then is "
                f"the run's (sha256 {(rec.run.report_sha256 or 'none')[:12]})")


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _collect_report(rec: RunRecord, ctx: LaunchContext, relative: str, snapshot: bytes | None = None) -> bool:
    """The agent's report copied out without following a link; a linked, odd or oversized
    one is kept out of the run folder and voids the run (`ctx.untrusted`). A run stopped
    after its report keeps the report as it stood at the stop (`snapshot`)."""
    if snapshot is not None:
        untrusted.keep_copy(snapshot, ctx.paths.report)
    else:
        try:
            untrusted.copy_out(ctx.workspace, relative, ctx.paths.report, untrusted.REPORT_CAP)
        except FileNotFoundError:
            return False
        except untrusted.Refused as exc:
            ctx.untrusted.append(f"the report was refused: {exc}")
            return False
    rec.artifacts.agent_output = str(ctx.paths.report)
    return True
