"""The collect stage: the session's figures from the run's own opencode store, the serving
figures, the mission's phases and signals, and the verdict on whether the run makes a row."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.opencode import config as oc_config
from harness.opencode.store import collect as collect_store
from harness.opencode.store import session_tree
from harness.records.record import RunRecord, SessionFigures, Status, WireFigures
from harness.sandbox import wirelog
from harness.serving.collect import collect_serving
from harness.stages.agent import collect_outputs
from harness.stages.context import LaunchContext
from harness.verdicts.drive import measure_drive
from harness.verdicts.phases import files_read_before, phases_between, phases_from_drive_text, signals_from_log_text


def collect(rec: RunRecord, ctx: LaunchContext) -> None:
    collect_outputs(rec, ctx)  # the report and findings the agent left
    data_dir = oc_config.data_dir(ctx.env)
    rec.session = own_session(data_dir, ctx)
    _wire(rec, ctx)
    if rec.session is not None:
        paths = ctx.paths
        rec.serving = collect_serving(data_dir, rec.session.root_session, paths.dir, paths.serving_timeline,
                                      paths.opencode_events)
        rec.serving.gpu_hourly_usd = ctx.pf.env.gpu_hourly_usd
        rec.serving.gpu_price_source = ctx.pf.env.gpu_price_source
        rec.artifacts.serving_table = str(paths.serving_table)
        for problem in rec.serving.store_check:
            ctx.say(f"store check: {problem}")
    _mission_figures(rec, ctx, data_dir)
    _judge(rec, ctx)


def own_session(data_dir: Path, ctx: LaunchContext) -> SessionFigures | None:
    """The session tree the harness's own `opencode run` started: the root its stdout events named
    (`sessionID`), and the sessions under it by parent_id (subagents); nothing else. Another
    opencode the agent ran (daemonized, re-parented) leaves a root of its own: counted as foreign
    on the record, never in the turns or tokens. No id on the events: no session is counted."""
    started = ctx.result.session_id if ctx.result is not None else None
    if not started:
        ctx.say("collect: the harness's opencode named no session on its events: none is counted")
        return None
    try:
        figures = collect_store(data_dir, session_id=started)
    except UserError as exc:
        ctx.say(f"collect: {exc.render()}")
        return None
    if figures.foreign_sessions:
        ctx.say(f"collect: {figures.foreign_sessions} session(s) in opencode's store outside the one the "
                "harness started: not counted")
    return figures


def _wire(rec: RunRecord, ctx: LaunchContext) -> None:
    """The run's figures from the wire log the sandbox's bridge kept, and the store checked against them."""
    path = ctx.paths.wire_log
    if not path.is_file():
        return
    entries = wirelog.read_log(path)
    seen = wirelog.figures(entries)
    rec.wire = WireFigures(**seen, **ctx.wire_counts.get(path, {}))  # the same fields (pydantic builds its Tokens)
    rec.artifacts.wire_log = str(path)
    if rec.session is not None:
        t = rec.session.tokens
        store = {"input": t.input, "output": t.output, "cache_read": rec.session.cache_read,
                 "turns": rec.session.turns}
        rec.wire.store_disagrees = wirelog.disagreements(seen, store)
        stopped_at = ctx.result.stopped_at if ctx.result is not None else None
        settled = wirelog.figures(wirelog.settled_entries(entries, stopped_at)) if stopped_at else None
        ctx.wire_decisive = wirelog.decisive(seen, store, settled)
        if settled and rec.wire.store_disagrees and settled["turns"] != seen["turns"] and not ctx.wire_decisive:
            rec.wire.store_disagrees.append(
                f"{seen['turns'] - settled['turns']} turn(s) the harness's stop cut off may reach the wire only")
    else:
        rec.wire.store_disagrees = ["opencode's store could not be read"]
    for problem in rec.wire.store_disagrees:
        ctx.say(f"wire check: {problem}")
    if rec.wire.tool_requests:
        ctx.say(f"wire: {rec.wire.tool_requests} request(s) a tool sent to the model, counted apart "
                f"({rec.wire.tool_input_tokens:,} input tokens)")


def _mission_figures(rec: RunRecord, ctx: LaunchContext, data_dir) -> None:
    """Phases from the drive (the store's scenario requests when the mission tags them: the
    harness's drive gate; else the drive record), signals from the query log, reads before the drive."""
    m, workspace, telemetry = ctx.pf.mission.manifest, ctx.workspace, ctx.paths.telemetry
    if m.drive_record:
        rec.artifacts.drive_record = str(workspace / m.drive_record)  # agent-writable: kept, never trusted
        rec.phases = phases_from_drive_text(ctx.agent_text(m.drive_record, "drive record"),
                                            rec.times.mission_start, rec.times.mission_end)
    if m.drive_user_agent:
        # The harness ran the scenario (`obs drive`): only its tagged traces count.
        key, windows = (ctx.drive.key, ctx.drive.windows()) if ctx.drive is not None else (None, None)
        rec.drive = measure_drive(telemetry, m.drive_user_agent, rec.times.mission_start, rec.times.mission_end,
                                  key=key, windows=windows)
        if rec.drive.own_requests:
            ctx.say(f"drive gate: {rec.drive.own_requests} trace(s) of the agent's own traffic beside the drive")
        rec.phases = phases_between(rec.drive.start, rec.drive.end, rec.times.mission_start, rec.times.mission_end)
        if rec.drive.problem:
            ctx.say(f"drive gate: {rec.drive.problem}")
    if m.signal_log:
        rec.artifacts.signal_log = str(workspace / m.signal_log)
        rec.signals = signals_from_log_text(ctx.agent_text(m.signal_log, "signal log"))
    if rec.session and rec.phases and rec.phases.drive_start:
        ids = session_tree(data_dir, rec.session.root_session)
        rec.files_read_before_drive = files_read_before(data_dir, ids, rec.phases.drive_start)
    if telemetry.exists():
        rec.artifacts.telemetry = str(telemetry)


def _judge(rec: RunRecord, ctx: LaunchContext) -> None:
    """A row only from a whole run: every reason against it is named on the record."""
    result, reasons = ctx.result, []
    if rec.run is not None and rec.run.stopped_after_report:
        pass  # the harness ended it once its report was persisted: a whole run (its report collected)
    elif result.ended_by:
        reasons.append(f"the run was ended: {result.ended_by}")
    elif result.exit_code != 0:
        reasons.append(f"opencode exited {result.exit_code} ({'; '.join(result.errors[-1:]) or 'see stderr'})")
    if not rec.run.report_found:
        reasons.append(f"the agent wrote no report at {ctx.pf.mission.manifest.report}")
    if rec.session is None:
        reasons.append("no session found in the run's opencode store")
    if rec.drive is not None and rec.drive.problem:
        reasons.append(rec.drive.problem)  # the harness's drive gate: no row without a real drive
    if ctx.wire_decisive:
        reasons.append("the wire and opencode's store disagree past the tolerance "
                       f"(1% of tokens, 1 turn): {'; '.join(ctx.wire_decisive)}")
    reasons += ctx.untrusted  # a linked or oversized file the agent left: no row on it
    if rec.sandbox is not None and ctx.untrusted:  # each refusal a denial on the record too
        rec.sandbox.denied += [f"harness: {why}" for why in ctx.untrusted]
        rec.sandbox.denials = len(rec.sandbox.denied)
    if reasons and rec.run is not None and rec.run.pace:
        reasons.append(rec.run.pace)  # why it ran out of time, when the box took its decode (issue 62)
    if reasons:
        rec.status, rec.reason, rec.stopped_at = Status.void, "; ".join(reasons), "run"
    else:
        rec.status, rec.reason, rec.stopped_at = Status.ok, None, None
