"""A run's trajectory in ATIF (Harbor's RFC 0001; the pinned `atif` package's models validate it):
`trajectory.json` in the run folder.

Built from the run folder's own files: the agent's turns from opencode's store or events
(`sources`), each model turn's metrics from the harness's wire log (what crossed the sandbox's
bridge, out of the agent's reach: prompt, completion, cached and reasoning tokens, start, first
data, end), the agent and the model as served from run.json. A run folder that keeps neither
store nor events (committed runs keep run.json and report.md only) gets one aggregated agent
step (`llm_call_count` = the wire's model calls, its metrics the wire's totals).

Steps: the user's prompt (the session's first user message; from the events, the mission's
prompt file when its sha256 is the run's), then per assistant message one agent step with its
text, reasoning, tool calls and their observations. A task tool call's child session is an
embedded subagent trajectory (`subagent_trajectories`, `trajectory_id` = opencode's session id)
that the call's observation names (`SubagentTrajectoryRef`). A wire exchange belongs to the
assistant message whose span overlaps it most (of equals, the latest created: a subagent's call
lies inside its parent's task message too); an exchange no message holds is counted in the
notes, and the final metrics are the wire log's own figures (harness/sandbox/wirelog.figures).

Keys: the launch writes this file before the post-run scrub walks the run folder, so the scrub
redacts it like any other text file of the run (harness/launcher/launch.py). Host paths: every string
of the document has the run folder, the project root and the home folder replaced (`<run>`,
`<project>`, `~`), the run folder also where it was moved from (any path ending in
`.llms-benchmark/runs/<run-id>`).
"""

from __future__ import annotations

import json
from pathlib import Path

import atif
from pydantic import ValidationError

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.records.paths import RUN_RECORD, TRAJECTORY
from harness.records.record import RunRecord
from harness.sandbox import wirelog
from harness.trajectory import sources
from harness.trajectory.hostpaths import unhost
from harness.trajectory.sources import AgentSession, Entry, Sessions, bounded
from harness.trajectory.wire_metrics import iso_ms, assign, chat_rows, store_metrics, wire_metrics

SCHEMA_VERSION = "ATIF-v1.8"  # the version of the pinned `atif` models that validate it
AGENT = "opencode"
MAX_DEPTH = 32  # subagents nested deeper are named in the notes, not embedded


def _record(run_dir: Path) -> RunRecord:
    path = run_dir / RUN_RECORD
    if not path.is_file():
        raise UserError(f"no run record at {path}", file=path, field="RUN",
                        fix="give a run folder (or a run id under .llms-benchmark/runs) that holds run.json")
    try:
        return RunRecord.load(path)
    except (ValidationError, ValueError, OSError) as exc:
        raise UserError(f"the run record cannot be read ({type(exc).__name__})", file=path,
                        fix="give a run.json the harness wrote") from None


# -- steps ------------------------------------------------------------------------------------
class _Builder:
    def __init__(self, run_dir: Path, record: RunRecord, found: Sessions, rows: list[dict] | None) -> None:
        self.run_dir, self.record, self.found = run_dir, record, found
        self.by_turn, self.unmatched = assign(rows or [], found)
        self.agent = _agent(record)
        self.notes: list[str] = []

    def trajectory(self, sid: str, depth: int = 0) -> atif.Trajectory:
        session = self.found.sessions[sid]
        children = [s for s in self.found.sessions.values() if s.parent == sid]
        embedded: list[atif.Trajectory] = []
        if children and depth >= MAX_DEPTH:
            self.notes.append(f"{len(children)} subagent session(s) below depth {MAX_DEPTH} not embedded")
        elif children:
            embedded = [self.trajectory(c.id, depth + 1) for c in children]
        refs = self._refs(session, children)
        steps = [self._step(i + 1, e, refs) for i, e in enumerate(session.entries)]
        return atif.Trajectory(
            schema_version=SCHEMA_VERSION, session_id=self.record.run_id, trajectory_id=sid, agent=self.agent,
            steps=steps, final_metrics=_summed(steps), subagent_trajectories=embedded or None,
            extra={"opencode_session": sid, "parent_session": session.parent} if depth else None)

    def _refs(self, session: AgentSession, children: list[AgentSession]) -> dict[str, str]:
        """tool call id -> the child session it opened: named by the call's metadata, else the
        task call whose run holds the child's creation."""
        ids = {c.id for c in children}
        refs = {t.call_id: t.child for e in session.entries for t in e.tools if t.child in ids}
        for child in children:
            if child.id in refs.values() or child.created_ms is None:
                continue
            for e in session.entries:
                for t in e.tools:
                    if (t.call_id not in refs and t.started_ms is not None
                            and t.started_ms <= child.created_ms <= (t.ended_ms or float("inf"))):
                        refs[t.call_id] = child.id
                        break
                else:
                    continue
                break
        return refs

    def _step(self, step_id: int, entry: Entry, refs: dict[str, str]) -> atif.Step:
        if entry.role == "user":
            return atif.Step(step_id=step_id, source="user", message=entry.text, timestamp=iso_ms(entry.created_ms))
        rows = self.by_turn.get(entry.id) or []
        metrics = wire_metrics(rows) if rows else store_metrics(entry.tokens) if entry.tokens else None
        calls = [atif.ToolCall(tool_call_id=t.call_id, function_name=t.name, arguments=t.arguments,
                               extra={"status": t.status, "started": iso_ms(t.started_ms), "ended": iso_ms(t.ended_ms)})
                 for t in entry.tools]
        results = [atif.ObservationResult(
            source_call_id=t.call_id, content=t.output if t.output is not None else "",
            subagent_trajectory_ref=[atif.SubagentTrajectoryRef(trajectory_id=refs[t.call_id],
                                                                session_id=self.record.run_id)]
            if t.call_id in refs else None) for t in entry.tools]
        return atif.Step(
            step_id=step_id, source="agent", timestamp=rows[0].get("started") if rows else iso_ms(entry.created_ms),
            model_name=entry.model or self.agent.model_name, reasoning_effort=self.record.key.effort,
            message=entry.text, reasoning_content=entry.reasoning or None, tool_calls=calls or None,
            observation=atif.Observation(results=results) if results else None, metrics=metrics,
            llm_call_count=len(rows) or (1 if entry.tokens else None),
            extra={"message_id": entry.id, "completed": iso_ms(entry.completed_ms), "finish": entry.finish})


def _summed(steps: list[atif.Step]) -> atif.FinalMetrics:
    ms = [s.metrics for s in steps if s.metrics is not None]
    return atif.FinalMetrics(total_prompt_tokens=sum(m.prompt_tokens or 0 for m in ms),
                             total_completion_tokens=sum(m.completion_tokens or 0 for m in ms),
                             total_cached_tokens=sum(m.cached_tokens or 0 for m in ms), total_steps=len(steps))


def _agent(record: RunRecord) -> atif.Agent:
    """opencode and its version; the model as served: its name, the preset, the effort applied, the engine."""
    version = (record.session.opencode_version if record.session else None) or record.versions.get("opencode")
    engine = record.engine.model_dump(exclude={"read_from"}) if record.engine else None
    return atif.Agent(name=AGENT, version=version or "unknown", model_name=record.served_name or record.model,
                      extra={"model": record.model, "served_name": record.served_name, "preset": record.key.preset,
                             "effort": record.key.effort, "effort_requested": record.key.effort_requested,
                             "engine": engine, "stack": record.stack, "environment": record.environment,
                             "gpu": record.key.gpu, "max_model_len": record.max_model_len,
                             "preset_sha256": record.preset_sha256, "provider": "vot"})


def _mission_prompt(run_dir: Path, record: RunRecord) -> str | None:
    """The mission's prompt, only when the mission as it is now hashes to the run's (it is what was sent)."""
    from harness.mission import load_mission

    here = Path(__file__).resolve().parents[2]
    for root in {run_dir.resolve().parents[2] if len(run_dir.resolve().parents) > 2 else here, here}:
        try:
            mission = load_mission(root, record.mission)
        except (UserError, OSError):
            continue
        if record.mission_sha256 and mission.sha256 == record.mission_sha256:
            return bounded(mission.prompt_text)
    return None


def _wire_final(rows: list[dict] | None, record: RunRecord) -> tuple[dict | None, str]:
    if rows is not None:
        return wirelog.figures(rows), "wire.jsonl"
    if record.wire is not None:
        return {"tokens": record.wire.tokens.model_dump(), "turns": record.wire.turns}, "run.json (wire)"
    if record.session is not None:
        return {"tokens": record.session.tokens.model_dump(), "turns": record.session.turns}, "run.json (session)"
    return None, ""


def build_trajectory(run_dir: Path) -> atif.Trajectory:
    """The run folder's trajectory, validated by the `atif` models (host paths replaced)."""
    run_dir = Path(run_dir)
    record = _record(run_dir)
    if record.times.mission_start is None:
        raise UserError(f"run {record.run_id} never started its mission (stopped at {record.stopped_at}): "
                        "no agent step to export", file=run_dir / RUN_RECORD, field="times.mission_start",
                        fix="export a run that reached its mission")
    rows = chat_rows(run_dir, record)
    found = sources.read(run_dir, record.session.root_session if record.session else None,
                         record.artifacts.opencode_events)
    notes: list[str] = []
    if found is None:
        traj = _aggregated(run_dir, record)
        notes.append("the run folder keeps no opencode store or events: one step stands for the agent's model "
                     "calls (llm_call_count), its message the agent's report")
        if traj.steps[0].source != "user":
            notes.append(f"no user step: missions/{record.mission} no longer hashes to the run's mission_sha256")
    else:
        builder = _Builder(run_dir, record, found, rows)
        traj = builder.trajectory(found.root)
        notes += [f"steps from {found.source}"] + builder.notes
        if found.skipped:
            notes.append(f"{found.skipped} store row(s) or event line(s) over {sources.PART_CAP:,} bytes or "
                         "unreadable were left out")
        if builder.unmatched:
            notes.append(f"{builder.unmatched} model call(s) on the wire belong to no opencode message "
                         "(counted in final_metrics only)")
        if not any(s.source == "user" for s in traj.steps) and (prompt := _mission_prompt(run_dir, record)):
            user = atif.Step(step_id=1, source="user", message=prompt, timestamp=iso_ms(
                record.times.mission_start.timestamp() * 1000), extra={"from": f"missions/{record.mission} prompt"})
            steps = [user, *(s.model_copy(update={"step_id": s.step_id + 1}) for s in traj.steps)]
            traj = traj.model_copy(update={"steps": steps})
    figures, source = _wire_final(rows, record)
    final = traj.final_metrics or _summed(traj.steps)
    if figures is not None:
        tokens = figures["tokens"]
        final = atif.FinalMetrics(
            total_prompt_tokens=tokens["input"], total_completion_tokens=tokens["output"],
            total_cached_tokens=tokens["cache"], total_steps=len(traj.steps),
            extra={"source": source, "reasoning_tokens": tokens.get("reasoning", 0), "model_calls": figures["turns"]})
    doc = traj.model_copy(update={
        "final_metrics": final, "notes": "; ".join(notes) or None,
        "extra": {"run_id": record.run_id, "run_record": RUN_RECORD, "mission": record.mission,
                  "mission_sha256": record.mission_sha256, "scripted": record.scripted,
                  "wire_log": "wire.jsonl" if rows is not None else None}}).to_json_dict()
    try:
        return atif.Trajectory.model_validate(unhost(doc, run_dir, record.run_id))
    except ValidationError as exc:  # a harness bug, or a text the models refuse: named, never half written
        raise UserError(f"the trajectory does not validate as ATIF: {exc.errors()[0]['msg']}",
                        file=run_dir / TRAJECTORY, fix="report it: harness/trajectory/atif_out.py built it") from None


def _aggregated(run_dir: Path, record: RunRecord) -> atif.Trajectory:
    """A committed run (run.json and report.md kept): the prompt, then one step for all its model calls."""
    figures, _ = _wire_final(None, record)
    report = run_dir / (record.artifacts.agent_output or "report.md")
    text = ""
    if report.is_file() and not report.is_symlink():
        with report.open("r", encoding="utf-8", errors="replace") as fh:
            text = bounded(fh.read(sources.TEXT_CAP + 1))
    agent = _agent(record)
    steps = []
    if prompt := _mission_prompt(run_dir, record):
        steps.append(atif.Step(step_id=1, source="user", message=prompt,
                               timestamp=iso_ms(record.times.mission_start.timestamp() * 1000)))
    metrics = None
    if figures is not None:
        t = figures["tokens"]
        metrics = atif.Metrics(prompt_tokens=t["input"], completion_tokens=t["output"], cached_tokens=t["cache"],
                               extra={"source": "run.json", "reasoning_tokens": t.get("reasoning", 0)})
    steps.append(atif.Step(
        step_id=len(steps) + 1, source="agent", message=text, model_name=agent.model_name,
        reasoning_effort=record.key.effort, metrics=metrics, llm_call_count=figures["turns"] if figures else None,
        timestamp=iso_ms(record.times.mission_start.timestamp() * 1000),
        extra={"aggregated": True, "report": record.artifacts.agent_output,
               "completed": iso_ms(record.times.mission_end.timestamp() * 1000) if record.times.mission_end else None}))
    return atif.Trajectory(schema_version=SCHEMA_VERSION, session_id=record.run_id,
                           trajectory_id=(record.session.root_session if record.session else None) or record.run_id,
                           agent=agent, steps=steps)


def write_trajectory(run_dir: Path) -> Path:
    """`run_dir/trajectory.json`: built, validated by `atif.Trajectory.model_validate`, written atomically."""
    run_dir = Path(run_dir)
    traj = build_trajectory(run_dir)
    text = json.dumps(traj.to_json_dict(), indent=2, ensure_ascii=False)
    atif.Trajectory.model_validate(json.loads(text))  # what is written is what validates
    return write_atomic(run_dir / TRAJECTORY, text + "\n")
