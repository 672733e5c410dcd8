"""The run record: the single source of truth a launch writes (`run.json`).

Every later view (the results page, scores, reports) is rendered from run records
and rulings alone. Times are UTC, ISO 8601.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field, field_serializer, field_validator

from harness.atomic import write_atomic
from harness.escape import one_line
from harness.records.capacity import CapacityFigures
from harness.records.drive import DriveFigures
from harness.records.engine import EngineInfo
from harness.records.serving import ServingFigures
from harness.records.unit_death import UnitDeath


def utcnow() -> datetime:
    return datetime.now(UTC)


# The reason on a record whose collect (after the destroy) has not finished: a launch killed
# before it ended leaves it so (harness/launcher/after_destroy.py); `wait` does not read it as an end.
COLLECT_PENDING = "the collect did not finish (it runs after the destroy; the launch died before it ended)"


class Status(StrEnum):
    ok = "ok"  # a row was produced (exit 0)
    void = "void"  # the run happened but yields no row (exit 1)
    refused = "refused"  # preflight or smoke refused: nothing (more) measured (exit 2)
    fault = "fault"  # the harness itself failed, or the launch was interrupted (exit 3)

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "void": 1, "refused": 2, "fault": 3}[self.value]


class RowKey(BaseModel):
    """What identifies a results row: preset, effort as applied, CLI, GPU cell."""

    preset: str
    effort: str  # as applied: the requested level, or "default" when the model has no variant
    effort_requested: str
    cli: str = "opencode"
    gpu: str


class Timestamps(BaseModel):
    launch: datetime
    serve_start: datetime | None = None
    ready: datetime | None = None
    probed: datetime | None = None
    smoked: datetime | None = None
    mission_start: datetime | None = None
    mission_end: datetime | None = None
    destroyed: datetime | None = None
    collected: datetime | None = None  # the collect began (after the destroy: it reads what the agent left)
    end: datetime | None = None


class Probe(BaseModel):
    decode_short_tps: float | None = None
    decode_long_tps: float | None = None
    prefill_tps: float | None = None
    long_context_tokens: int | None = None
    ttft_short_s: float | None = None
    ttft_long_s: float | None = None
    notes: list[str] = Field(default_factory=list)


class Tokens(BaseModel):
    input: int = 0  # input + cache read + cache write
    output: int = 0  # output + reasoning
    cache: int = 0  # cache read + cache write
    reasoning: int = 0


class SessionFigures(BaseModel):
    """What Collect reads from the run's own opencode session store."""

    root_session: str
    sessions: int
    tokens: Tokens
    turns: int
    median_turn_s: float | None
    compactions: int
    opencode_version: str | None
    started: datetime | None = None
    ended: datetime | None = None
    cache_read: int | None = None  # of `tokens.cache`: what the wire's cached_tokens is checked against
    # Sessions in the store outside that tree (another opencode the agent ran): listed, never counted.
    foreign_sessions: int = 0


class Phases(BaseModel):
    """From the scenario's drive record: preflight = mission start → drive start,
    drive = its window, observation = drive end → mission end."""

    drive_start: datetime | None = None
    drive_end: datetime | None = None
    preflight_s: float | None = None
    drive_s: float | None = None
    observation_s: float | None = None


class RunOutcome(BaseModel):
    """How the opencode process ended, and why if the harness ended it."""

    exit_code: int | None = None
    ended_by: str | None = None  # None: it ended on its own; else "watchdog: ..." / "time cap" / "interrupted"

    # What ended it may quote the agent's side (a tool's name, opencode's error): one line, no raw
    # control byte, whoever set it (issue 60).
    _one_line = field_validator("ended_by", "pace", mode="after")(lambda v: one_line(v) if isinstance(v, str) else v)
    _one_line_out = field_serializer("ended_by", "pace")(lambda self, v: one_line(v) if isinstance(v, str) else v)
    # The decode's fall while it ran, from the pace timeline (issue 62): "decode fell from 15.4 to
    # 0.4 tok/s at 10:14:30 UTC while other processes wanted 1.0 core; threads 2 kept". None: it held.
    pace: str | None = None
    events: int = 0
    report_found: bool = False
    report_sha256: str | None = None  # the report as collected (for a stop after the report: as it stood then)
    stopped_after_report: str | None = None  # "by the maintainer" / "N turns without changing it": ok, not void


class WireFigures(BaseModel):
    """The run's model calls as the sandbox's bridge saw them (wire.jsonl): out of the agent's
    reach, so the row's tokens, turns and median turn come from here; opencode's store, which
    the agent can write, is cross-checked against them."""

    requests: int = 0
    turns: int = 0  # chat completions answered 200
    failed: int = 0  # answered 4xx/5xx
    without_usage: int = 0  # turns whose answer carried no usage (their tokens are unknown)
    tokens: Tokens = Field(default_factory=Tokens)
    median_turn_s: float | None = None
    tool_calls: dict[str, int] = Field(default_factory=dict)
    # Requests a tool the agent ran sent to the model's port (not opencode's): never turns.
    tool_requests: int = 0
    tool_input_tokens: int = 0
    unparsed: int = 0  # answers counted but not parsed (a plain body over a cap)
    broken: int = 0  # connections closed unrelayed: their bytes were not HTTP/1.1
    refused: int = 0  # connections past the bridge's cap, closed at once
    store_disagrees: list[str] = Field(default_factory=list)  # empty: the store matches the wire


class SandboxFigures(BaseModel):
    """How the agent was confined, and what the confinement refused it."""

    kind: str  # "bwrap", "sandbox-exec", or "none" (--no-sandbox: the row is marked)
    denials: int = 0  # tool calls that failed on a hidden path, a read-only one, or the network
    denied: list[str] = Field(default_factory=list)
    network: str | None = None  # "own namespace" (only the unit and the mission's ports) or "host"
    agent_user: str | None = None  # the host uid/gid the agent ran as, in its own user namespace
    limits: dict[str, str] | None = None  # each cap and what enforced it
    privilege: dict[str, str] | None = None  # privcheck's probes at preflight: each must read "refused"
    launcher_peak_rss_mib: float | None = None  # the launch process's peak memory (the wire tap's buffers)


class Trial(BaseModel):
    """One of K trials on one serve (`launch --trials K`): the unit was served, probed and
    smoked once, in the group's first trial; each trial ran the mission on a fresh workspace,
    store, opencode data and mission stack, and is its own record. The serve's GPU-hours
    are the group's, shared: every trial's record carries the same figure."""

    group: str  # the first trial's run id: its folder holds the unit's log, probe and smoke
    index: int  # 1-based
    of: int  # trials asked for
    gpu_hours_shared: bool = True


class Artifacts(BaseModel):
    unit_log: str | None = None
    opencode_events: str | None = None
    opencode_stderr: str | None = None
    agent_output: str | None = None  # the agent's report
    provider_file: str | None = None
    workspace: str | None = None
    served_log: str | None = None  # replay only: what the script served
    drive_record: str | None = None
    signal_log: str | None = None
    telemetry: str | None = None  # the run's own telemetry store (kept for rulings)
    serving_timeline: str | None = None  # /metrics readings of the run window (serving-timeline.jsonl)
    pace_timeline: str | None = None  # the server's pace, others' CPU demand and the threads, each retune (pace.jsonl)
    serving_table: str | None = None  # per model call: store tokens joined with the server's figures
    wire_log: str | None = None  # per model call as the sandbox's bridge saw it (wire.jsonl)
    trajectory: str | None = None  # the agent's steps in ATIF (trajectory.json), validated when written

    def relative_to(self, run_dir: Path) -> Artifacts:
        """Files inside the run folder named relative to it: run records are committed, and
        a clone elsewhere must find them (absolute paths of older records still load)."""
        base = run_dir.resolve()
        out = {}
        for name, value in self.model_dump().items():
            if value and Path(value).is_absolute():
                try:
                    value = str(Path(value).resolve().relative_to(base))
                except ValueError:
                    pass  # outside the run folder: kept as it is
            out[name] = value
        return Artifacts(**out)

    def path(self, run_dir: Path, name: str) -> Path | None:
        """Artifact `name` as a path, relative ones resolved against the run folder."""
        value = getattr(self, name)
        return run_dir / value if value else None


class RunRecord(BaseModel):
    run_id: str
    schema_version: int = 1
    key: RowKey
    environment: str
    stack: str
    mission: str
    scripted: bool = False  # a replay trajectory, not a model: never a real row
    status: Status = Status.fault
    reason: str | None = None
    stopped_at: str | None = None  # the stage that ended a non-ok launch
    times: Timestamps
    gpu_hours: float | None = None
    gpus: int | None = None  # GPUs billed while the unit lived (GPU-hours = its hours x this)
    trial: Trial | None = None  # one of K trials on one serve; None: a launch of one run
    unit: str | None = None
    api_key: str | None = None  # how the key the agent's side saw was made (its fingerprint, never the key)
    served_name: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    preset_sha256: str | None = None
    mission_sha256: str | None = None
    # How the unit served (the stack's own words): flags, chat template and its sha256,
    # the server's build and what it reported at start (system_info, the tool-call format).
    serving_config: dict[str, str | list[str]] = Field(default_factory=dict)
    engine: EngineInfo | None = None  # the serving engine and its version, as the server says them
    unit_death: UnitDeath | None = None  # the unit died on its own: status, signal, cause, log tail
    probe: Probe | None = None
    smoke: str | None = None
    # The cloud SDK's own retries of the create (issue 61: "PUT 503" each), whatever came of it.
    create_retries: list[str] = Field(default_factory=list)

    # A reason quotes what the agent's side left (a file's name, opencode's error, a tool's name):
    # escaped here, whoever composed it, so neither run.json nor the terminal that prints it ever
    # carries a raw control byte or a forged line (issue 60).
    _one_line = field_validator("reason", "stopped_at", "smoke", mode="after")(
        lambda v: one_line(v) if isinstance(v, str) else v)
    # ... and again as it is written (a field set by assignment is not validated).
    _one_line_out = field_serializer("reason", "stopped_at", "smoke")(
        lambda self, v: one_line(v) if isinstance(v, str) else v)
    run: RunOutcome | None = None
    session: SessionFigures | None = None
    wire: WireFigures | None = None  # None: no wire log (no sandbox bridge: --no-sandbox, macOS, a remote unit)
    phases: Phases | None = None
    drive: DriveFigures | None = None  # the harness's drive gate (missions with a scenario): no row if it failed
    signals: list[str] = Field(default_factory=list)  # telemetry signals queried with a non-empty result
    files_read_before_drive: list[str] = Field(default_factory=list)
    sandbox: SandboxFigures | None = None
    serving: ServingFigures | None = None  # what the serving did while the agent worked
    capacity: CapacityFigures | None = None  # `launch --capacity`: agents the serve sustained (the serve's)
    versions: dict[str, str] = Field(default_factory=dict)
    artifacts: Artifacts = Field(default_factory=Artifacts)
    notes: list[str] = Field(default_factory=list)  # what the run left undone that does not make it void

    def figures(self) -> tuple[Tokens, int, float | None] | None:
        """(tokens, turns, median turn): the wire's where the harness saw it, else the store's."""
        if self.wire is not None:
            return self.wire.tokens, self.wire.turns, self.wire.median_turn_s
        if self.session is not None:
            return self.session.tokens, self.session.turns, self.session.median_turn_s
        return None

    def save(self, run_dir: Path) -> Path:
        """Written atomically (temp file + rename): a crash mid-write keeps the last version.
        What names a file of the run names it relative to the run folder (the record is committed)."""
        prefix = f"{run_dir.resolve()}/"
        stored = self.model_copy(update={
            "artifacts": self.artifacts.relative_to(run_dir),
            "reason": self.reason.replace(prefix, "") if self.reason else self.reason,
        })
        return write_atomic(run_dir / "run.json", stored.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        return cls.model_validate_json(path.read_text())
