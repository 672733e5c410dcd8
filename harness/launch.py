"""`launch local`: the pipeline of stages over one run record.

Preflight → Serve → Probe → Configure → Smoke → Run → Collect → Destroy

Each stage reads what earlier stages recorded and writes its result into the
record. Destroy runs in a `finally` and on SIGINT/SIGTERM; it is the only stage
that always runs. A unit is in the ledger before it is created, so even a
SIGKILLed launch leaves it findable: the next command that serves destroys it first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
import traceback
from datetime import timedelta
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from harness import failpoint, untrusted
from harness.drive import measure_drive
from harness.errors import FatalUnitLog, StackError, UserError
from harness.mission import DEFAULT_MISSION, prepare_workspace
from harness.mission_services import merge_env, start_services
from harness.opencode import config as oc_config
from harness.opencode.runner import Limits, RunResult, run_opencode
from harness.opencode.store import collect, session_tree
from harness.phases import files_read_before, phases_between, phases_from_drive_text, signals_from_log_text
from harness.preflight import Preflight, run_preflight
from harness.probe import LONG_TARGET, run_probe, unit_api_key
from harness.record import RowKey, RunOutcome, RunRecord, SandboxFigures, Status, Timestamps, utcnow
from harness.sandbox import Sandbox, View, agent_view, count_denials, must_stay_hidden, prove_view, wrap
from harness.sandbox_net import bridge, is_loopback_url, loopback_ports
from harness.secrets import scrub_files, scrub_tree, secrets_from
from harness.server_metrics import GENERATED, counter
from harness.serving.collect import collect_serving, gpu_cost
from harness.serving.timeline import TIMELINE_NAME, Sampler
from harness.stacks.base import Stack, Unit
from harness.stacks.ledger import Ledger
from harness.stacks.local_process import AGENT_MARKER_VAR, kill_marked
from harness.stacks.registry import get_stack
from harness.unitlog import UnitLogCollector, wait_ready

SMOKE_PROMPT = "run the shell command date and reply with its output"
SMOKE_LIMITS = Limits(time_cap_s=10 * 60, stall_s=5 * 60)

Say = Callable[[str], None]


class Interrupted(BaseException):
    """SIGINT/SIGTERM during a launch: unwinds to the `finally` that destroys."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class SmokeFailed(UserError):
    pass


@dataclass
class LaunchOptions:
    root: Path
    environment: str
    preset: str
    effort: str = "medium"
    mission: str = DEFAULT_MISSION
    probe_long_tokens: int | None = None  # None: 82k where the context allows
    sandbox: bool = True  # False: --no-sandbox (the record and the row say so)


def runs_dir(root: Path) -> Path:
    return root / ".llms-benchmark" / "runs"


def new_run_id(preset: str, effort: str) -> str:
    return f"{utcnow():%Y%m%dT%H%M%SZ}-{preset}-{effort}-{uuid.uuid4().hex[:4]}"


@contextlib.contextmanager
def on_signals(handler) -> Iterator[None]:
    """Route SIGINT and SIGTERM to `handler` for the duration of the block."""
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _raise_interrupted(signum, _frame):
    """SIGINT and SIGTERM unwind to the `finally` that destroys."""
    raise Interrupted(signum)


# -- leftovers ------------------------------------------------------------------------
def _owner_alive(unit: Unit) -> bool:
    owner = unit.extra.get("owner_pid")
    if not owner:
        return True  # served by hand with `serve`: not a leftover
    try:
        return psutil.Process(owner).create_time() == unit.extra.get("owner_started")
    except psutil.NoSuchProcess:
        return False


def destroy_leftovers(root: Path, say: Say) -> list[str]:
    """Units whose launch died (SIGKILL, power loss) are destroyed before anything new."""
    ledger = Ledger(root)
    destroyed = []
    for unit in ledger.all():
        if _owner_alive(unit):
            continue
        say(f"leftover unit {unit.name} on {unit.environment} from a launch that died "
            f"(pid {unit.extra.get('owner_pid')}): destroying it first")
        stack = get_stack(unit.stack, root)
        existed = stack.destroy(unit)
        agents = kill_marked(unit.extra.get("marker", ""), AGENT_MARKER_VAR)
        ledger.remove(unit)
        destroyed.append(unit.name)
        say(f"  {unit.name} {'destroyed' if existed else 'was already gone'}; removed from the ledger"
            + (f"; ended its orphaned opencode (pid {', '.join(map(str, agents))})" if agents else ""))
        _close_dead_record(unit)
    return destroyed


def _close_dead_record(unit: Unit) -> None:
    """The dead launch never wrote its ending: say in its record what happened."""
    path = Path(unit.extra.get("run_dir", "")) / "run.json"
    if not path.is_file():
        return
    try:
        rec = RunRecord.load(path)
    except ValueError:
        return
    if rec.times.end is not None:
        return
    rec.status, rec.stopped_at = Status.fault, rec.stopped_at or "killed"
    rec.reason = "the launch process died without finishing (SIGKILL or crash); a later command destroyed its unit"
    rec.times.destroyed = rec.times.end = utcnow()
    rec.save(path.parent)


def refuse_if_served(root: Path, environment: str, unit_name: str) -> None:
    existing = Ledger(root).get(environment, unit_name)
    if existing:
        raise UserError(
            f"{unit_name} is already served on {environment} ({existing.base_url}); never a second unit",
            file=Ledger(root).path,
            fix=f"destroy it first: llms-benchmark destroy {environment} {existing.preset}",
        )


# -- serve / destroy (also used by the `serve` and `destroy` commands) ---------------------
def plan_unit(pf: Preflight, ledger: Ledger, *, owner: bool, run_dir: Path | None = None) -> Unit:
    """Decide the unit and write it to the ledger before it exists: a crash from here on still finds it."""
    unit = pf.stack.plan(pf.env, pf.preset)
    if owner:
        me = psutil.Process()
        unit.extra.update(owner_pid=me.pid, owner_started=me.create_time(), run_dir=str(run_dir or ""))
        # The launch's agents carry the unit's marker (AGENT_MARKER_VAR) so the next command can
        # end them if the launch dies; a stack without local processes (azure) has none of its own.
        unit.extra.setdefault("marker", uuid.uuid4().hex)
    ledger.add(unit, exclusive=True)
    return unit


def start_unit(pf: Preflight, unit: Unit, ledger: Ledger) -> Unit:
    unit = pf.stack.serve(unit, pf.env, pf.preset)
    ledger.update(unit)
    return unit


def destroy_unit(stack: Stack, unit: Unit, ledger: Ledger) -> bool:
    existed = stack.destroy(unit)
    ledger.remove(unit)  # only after destroy verified it gone (destroy raises otherwise)
    return existed


# -- the pipeline ---------------------------------------------------------------------------
class Launch:
    def __init__(self, opts: LaunchOptions, say: Say) -> None:
        self.opts, self.say = opts, say
        self.root = opts.root
        self.run_id = new_run_id(opts.preset, opts.effort)
        self.run_dir = runs_dir(self.root) / self.run_id
        self.stage = "preflight"
        self.unit: Unit | None = None
        self.stack: Stack | None = None
        self.collector: UnitLogCollector | None = None
        self.gpus = 0
        self.report_name = ""
        self.services = None
        self.api_key: str | None = None  # the unit's key, in memory only (never recorded)
        self.late_signal: str | None = None  # SIGINT/SIGTERM that arrived while destroying
        self.sandbox = Sandbox("none")
        self.secret_names: list[str] = []  # the preset's env names: their values are secrets
        self.untrusted: list[str] = []  # agent-written files the harness refused to read
        self.record = RunRecord(
            run_id=self.run_id,
            key=RowKey(preset=opts.preset, effort=opts.effort, effort_requested=opts.effort, gpu="unknown"),
            environment=opts.environment, stack="unknown", mission=opts.mission,
            times=Timestamps(launch=utcnow()),
        )

    def save(self) -> None:
        self.record.save(self.run_dir)

    def run(self) -> RunRecord:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.save()
        rec = self.record
        try:
            with on_signals(_raise_interrupted):
                self._stages()
        except UserError as exc:  # SmokeFailed included: the model cannot drive the mission
            self._end(Status.refused, exc.render())
        except Interrupted as exc:
            self._end(Status.fault, str(exc))
        except (FatalUnitLog, StackError) as exc:
            self._end(Status.fault, str(exc))
        except Exception as exc:  # a harness bug: keep the traceback next to the record
            (self.run_dir / "fault.txt").write_text(traceback.format_exc())
            self._end(Status.fault, f"{type(exc).__name__}: {exc} (traceback in fault.txt)")
        finally:
            # A second Ctrl-C must not abandon a half-destroyed unit.
            with on_signals(self._signal_during_destroy):
                self._destroy()
        if self.late_signal is not None and rec.status in (Status.ok, Status.void):
            rec.status, rec.stopped_at = Status.fault, "destroy"
            rec.reason = f"interrupted by {self.late_signal} during destroy (the destroy finished first)"
        rec.times.end = utcnow()
        self.save()
        self._scrub_secrets()  # run.json last: it was written above
        return rec

    def _scrub_secrets(self) -> None:
        """The unit's key and the preset's env values out of everything the run left: the run
        folder (run.json last) and the units' logs under .vot/run."""
        secrets = secrets_from([self.api_key, *(os.environ.get(name) for name in self.secret_names)])
        unit_logs = sorted((self.root / ".vot" / "run").glob("*.log"))
        changed, left = scrub_files(unit_logs, secrets)
        in_run, left_in_run = scrub_tree(self.run_dir, secrets)
        changed, left = changed + in_run, left + left_in_run
        if changed:
            self.say(f"secrets redacted from {changed} file(s) of the run")
        if left:
            # Named (paths only) on the record; a binary we cannot parse is never rewritten.
            self.record.reason = ((self.record.reason + "; ") if self.record.reason else "") + \
                f"a secret could not be redacted from {', '.join(left)}"
            self.say(f"WARNING: a secret remains in {', '.join(left)}")
            self.save()
            scrub_files([self.run_dir / "run.json"], secrets)

    def _signal_during_destroy(self, signum, _frame) -> None:
        self.late_signal = self.late_signal or signal.Signals(signum).name
        self.say(f"{signal.Signals(signum).name} received: finishing the destroy first")

    def _end(self, status: Status, reason: str) -> None:
        self.record.status = status
        self.record.reason = reason
        self.record.stopped_at = self.stage

    # -- stages ---------------------------------------------------------------------------
    def _stages(self) -> None:
        opts, rec = self.opts, self.record
        self.say(f"run {self.run_id}")
        destroy_leftovers(self.root, self.say)

        failpoint.hit("preflight")
        pf = run_preflight(self.root, opts.environment, opts.preset, opts.mission, no_sandbox=not opts.sandbox)
        self.sandbox = pf.sandbox
        rec.sandbox = SandboxFigures(kind=pf.sandbox.kind)
        self.stack, self.gpus = pf.stack, pf.gpu.gpus
        self.opencode_binary = pf.opencode
        self.secret_names = list(pf.preset.env)
        rec.stack, rec.key.gpu = pf.env.stack, pf.gpu.label
        rec.model, rec.served_name, rec.max_model_len = pf.preset.model, pf.preset.served_name, pf.preset.max_model_len
        rec.preset_sha256, rec.mission_sha256 = pf.preset.sha256, pf.mission.sha256
        rec.versions["opencode"] = pf.opencode_version or ""
        self.say(f"preflight ok: {pf.env.stack} on {pf.gpu.label}; preset {pf.preset.name} serves "
                 f"{pf.preset.model} as {pf.preset.served_name}")
        for line in pf.kv_fit or []:
            self.say(f"kv fit: {line}")
        refuse_if_served(self.root, pf.env.name, f"vot-{pf.preset.name}")
        # Looked at from outside before anything bills: the key, the checkout, other runs and
        # the real HOME are invisible from inside, wherever the checkout lies.
        prove_view(self.sandbox, agent_view([self.run_dir], pf.opencode, []),
                   must_stay_hidden(self.root, self.run_dir, Path.home()))

        self.stage = "serve"
        ledger = Ledger(self.root)
        rec.times.serve_start = utcnow()
        self.unit = plan_unit(pf, ledger, owner=True, run_dir=self.run_dir)
        unit = start_unit(pf, self.unit, ledger)
        rec.unit, rec.scripted = unit.name, unit.scripted
        rec.artifacts.unit_log = str(self.run_dir / "unit.log")
        self.collector = UnitLogCollector(pf.stack, unit, self.run_dir / "unit.log")
        self.collector.start()
        self.save()
        self.say(f"serving {unit.name} at {unit.base_url} (billing until destroyed); waiting until it answers")
        failpoint.hit("serve")

        self.stage = "wait-ready"
        failpoint.hit("wait-ready")
        api_key = self.api_key = unit_api_key(pf.stack, unit)
        wait_ready(unit, pf.stack.ready_timeout_s, self.collector, api_key=api_key)
        rec.times.ready = utcnow()
        self.say(f"ready after {(rec.times.ready - rec.times.serve_start).total_seconds():.0f}s")
        self._describe_serving(pf)

        self.stage = "probe"
        failpoint.hit("probe")
        cap = getattr(pf.stack, "probe_long_cap", None)
        long_target = opts.probe_long_tokens or cap or LONG_TARGET
        try:
            rec.probe = run_probe(unit.base_url, unit.served_name, max_model_len=unit.max_model_len,
                                  api_key=api_key, long_target=long_target)
        except httpx.HTTPError as exc:
            raise StackError(f"{unit.name} failed the speed probe: {exc}") from exc
        if long_target < LONG_TARGET:
            why = "--probe-long-tokens" if opts.probe_long_tokens else f"the {pf.stack.name} stack's cap"
            rec.probe.notes.append(f"long-context target {long_target} tokens ({why})")
        self.collector.raise_if_problem()
        rec.times.probed = utcnow()
        self.save()
        p = rec.probe
        self.say(f"probe: decode {p.decode_short_tps} tok/s short, {p.decode_long_tps} tok/s at "
                 f"{p.long_context_tokens} tokens; prefill {p.prefill_tps} tok/s")

        self.stage = "configure"
        failpoint.hit("configure")
        provider = oc_config.provider_config(unit, reasoning_parser=pf.preset.reasoning_parser,
                                             steps=pf.mission.manifest.agent_steps,
                                             disabled_tools=pf.mission.manifest.disabled_tools)
        provider_file = oc_config.write_provider_file(provider, self.run_dir / "opencode-provider.json")
        rec.artifacts.provider_file = str(provider_file)
        variant = oc_config.applied_effort(provider, unit.served_name, opts.effort)
        rec.key.effort = variant or "default"
        argv_base = [str(pf.opencode), "run", "--model", f"vot/{unit.served_name}",
                     *(["--variant", variant] if variant else []), "--format", "json", "--auto",
                     "--print-logs", "--log-level", "INFO"]

        self.stage = "smoke"
        failpoint.hit("smoke")
        mission = pf.mission
        workspace = self.run_dir / "workspace"
        self._smoke(argv_base, provider_file, unit, prepare_workspace(mission, workspace))
        rec.times.smoked = utcnow()

        self.stage = "mission-setup"
        # The smoke ran in this very folder so that opencode's system prompt (which names the
        # working directory, ahead of the tool list) is the mission's: the server's prompt cache
        # then holds the mission's first ~7k tokens. The mission still starts from a fresh copy.
        workspace = prepare_workspace(mission, workspace)
        shutil.rmtree(self._agent_tmp, ignore_errors=True)
        self._agent_tmp.mkdir()
        rec.artifacts.workspace = str(workspace)
        self.services = start_services(mission, workspace, self.run_dir)
        env = merge_env(self._agent_env(self.run_dir / "opencode", provider_file, unit), self.services)

        self.stage = "run"
        title = f"llms-benchmark {pf.preset.name}"
        rec.artifacts.opencode_events = str(self.run_dir / "opencode-events.jsonl")
        rec.artifacts.opencode_stderr = str(self.run_dir / "opencode-stderr.log")
        limits = Limits(time_cap_s=mission.manifest.time_cap_minutes * 60, stall_s=mission.manifest.stall_minutes * 60)
        rec.times.mission_start = utcnow()
        self.save()
        self.say(f"running the '{mission.name}' mission with opencode (cap {mission.manifest.time_cap_minutes:g} min)")
        failpoint.hit("run")
        with self._network([unit.base_url, *env.values()]) as net:
            view = self._view(workspace, self.run_dir / "opencode", provider_file, net)
            argv = wrap(self.sandbox, [*argv_base, "--title", title], view, workspace, self.run_dir)
            # The serving timeline covers opencode's run and nothing else.
            sampler = Sampler(unit.base_url, self.run_dir / TIMELINE_NAME, api_key=api_key).start()
            rec.artifacts.serving_timeline = str(sampler.path)
            try:
                result = run_opencode(argv, prompt=mission.prompt_text, env=env, cwd=workspace,
                                      events_path=Path(rec.artifacts.opencode_events),
                                      stderr_path=Path(rec.artifacts.opencode_stderr), limits=limits,
                                      abort=self.collector.problem, abort_reason=self.collector.reason,
                                      on_event=sampler.on_event)
            finally:
                sampler.stop()
        rec.times.mission_end = utcnow()
        rec.sandbox.denials, rec.sandbox.denied = count_denials(Path(rec.artifacts.opencode_events), view, workspace)
        self._stop_services()  # services flush their telemetry on the way down
        self.report_name = mission.manifest.report
        found = self._collect_report(workspace, mission.manifest.report)
        rec.run = RunOutcome(exit_code=result.exit_code, ended_by=result.ended_by, events=result.events,
                             report_found=found)
        self.save()

        self.stage = "collect"
        failpoint.hit("collect")
        try:
            # The title and the launch time select this run's root session; the store is
            # this run's own anyway (isolated XDG dirs), the filters only make that explicit.
            rec.session = collect(oc_config.data_dir(env), title=title,
                                  since=rec.times.mission_start - timedelta(seconds=2))
        except UserError as exc:
            rec.session = None
            self.say(f"collect: {exc.render()}")
        if rec.session is not None:
            rec.serving = collect_serving(oc_config.data_dir(env), rec.session.root_session, self.run_dir,
                                          Path(rec.artifacts.serving_timeline), Path(rec.artifacts.opencode_events))
            rec.serving.gpu_hourly_usd = pf.env.gpu_hourly_usd
            rec.artifacts.serving_table = str(self.run_dir / "serving.jsonl")
            for problem in rec.serving.store_check:
                self.say(f"store check: {problem}")
        self._mission_figures(mission, workspace, oc_config.data_dir(env))
        self._judge(result)

    def _collect_report(self, workspace: Path, relative: str) -> bool:
        """The agent's report copied out without following a link; a linked, odd or oversized
        one is kept out of the run folder and voids the run (`self.untrusted`)."""
        try:
            untrusted.copy_out(workspace, relative, self.run_dir / "report.md", untrusted.REPORT_CAP)
        except FileNotFoundError:
            return False
        except untrusted.Refused as exc:
            self.untrusted.append(f"the report was refused: {exc}")
            return False
        self.record.artifacts.agent_output = str(self.run_dir / "report.md")
        return True

    def _agent_text(self, workspace: Path, relative: str, what: str) -> str:
        """An agent-writable file's text, read without following links ('' when absent or refused)."""
        try:
            return untrusted.read_text(workspace, relative, untrusted.RECORD_CAP)
        except FileNotFoundError:
            return ""
        except (untrusted.Refused, OSError) as exc:
            self.untrusted.append(f"the {what} was refused: {exc}")
            return ""

    def _describe_serving(self, pf: Preflight) -> None:
        """Optional stack member `describe`: how the unit serves (flags, chat template, build,
        what the server said at start), on the record next to the speeds it explains."""
        describe = getattr(pf.stack, "describe", None)
        if describe is None:
            return
        self.collector.drain()
        log = Path(self.record.artifacts.unit_log or "")
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        self.record.serving_config = describe(self.unit, pf.env, pf.preset, text)
        if info := self.record.serving_config.get("system_info"):
            self.say(f"server: {info}")

    @property
    def _agent_tmp(self) -> Path:
        # One TMPDIR path for the smoke and the mission (emptied between them): opencode names it
        # in its bash tool's description, so a path of its own would split the prompt cache.
        return self.run_dir / "agent-tmp"

    def _agent_env(self, home: Path, provider_file: Path, unit: Unit) -> dict[str, str]:
        env = oc_config.isolated_env(home, provider_file, unit.api_key_env, api_key=self.api_key,
                                     tmpdir=self._agent_tmp)
        env[AGENT_MARKER_VAR] = unit.extra.get("marker", "")
        return env

    def _view(self, workdir: Path, home: Path, provider_file: Path, net=None) -> View:
        view = agent_view([workdir, home, self._agent_tmp], self.opencode_binary, [provider_file])
        view.net = net
        return view

    def _network(self, urls: list[str]):
        """The agent's own network namespace, with the loopback ports among `urls` forwarded
        into it (the unit, the mission's services). A unit served elsewhere (azure) is not
        on loopback: the agent then keeps the host's network, and the record says so."""
        isolated = self.sandbox.enabled and is_loopback_url(urls[0])
        if self.record.sandbox is not None:
            self.record.sandbox.network = {"bwrap": "own namespace", "sandbox-exec": "loopback ports only"}.get(
                self.sandbox.kind, "host") if isolated else (
                "host (the unit is not on loopback)" if self.sandbox.enabled else "host")
        return bridge(self.sandbox.kind if isolated else None, loopback_ports(urls))

    def _smoke(self, argv_base: list[str], provider_file: Path, unit: Unit, scratch: Path) -> None:
        smoke_dir = self.run_dir / "smoke"
        smoke_dir.mkdir(parents=True, exist_ok=True)
        env = self._agent_env(smoke_dir / "opencode", provider_file, unit)
        self.say("smoke: asking for one bash tool call through opencode")
        before = counter(unit.base_url, GENERATED, api_key=self.api_key)
        with self._network([unit.base_url]) as net:
            view = self._view(scratch, smoke_dir / "opencode", provider_file, net)
            argv = wrap(self.sandbox, [*argv_base, "--title", "llms-benchmark smoke"], view, scratch, smoke_dir)
            result = run_opencode(argv, prompt=SMOKE_PROMPT, env=env,
                                  cwd=scratch, events_path=smoke_dir / "events.jsonl",
                                  stderr_path=smoke_dir / "stderr.log", limits=SMOKE_LIMITS,
                                  abort=self.collector.problem, abort_reason=self.collector.reason)
        self.collector.raise_if_problem()
        has_bash, has_text = "bash" in result.tool_uses, bool(result.texts)
        if has_bash and has_text:
            self.record.smoke = "passed: a bash tool_use event and a text event"
            self.say("smoke passed")
            return
        missing = " and ".join(name for name, ok in (("bash tool_use event", has_bash), ("text event", has_text))
                               if not ok)
        how = result.ended_by or f"opencode exited {result.exit_code}"
        after = counter(unit.base_url, GENERATED, api_key=self.api_key)
        if before is not None and after is not None:
            # Evidence from the server itself: a model streaming prose without end finishes no part.
            how += f"; the server generated {after - before:,.0f} tokens meanwhile"
        used = ", ".join(result.tool_uses) or "none"
        self.record.smoke = f"failed: no {missing}; {how}; tools used: {used}"
        raise SmokeFailed(
            f"the served model failed the smoke: {self.record.smoke}",
            file=smoke_dir / "events.jsonl",
            fix="serve the model with a working tool-call parser (and a tool-capable chat template); "
                "a model that answers in prose cannot drive the mission",
        )

    def _mission_figures(self, mission, workspace: Path, data_dir: Path) -> None:
        """Phases from the drive (the store's scenario requests when the mission tags them: the
        harness's drive gate; else the drive record), signals from the query log, reads before the drive."""
        rec, m = self.record, mission.manifest
        drive = workspace / m.drive_record if m.drive_record else None
        log = workspace / m.signal_log if m.signal_log else None
        if drive is not None:
            rec.artifacts.drive_record = str(drive)  # the agent can write it: kept, never trusted for the gate
            rec.phases = phases_from_drive_text(self._agent_text(workspace, m.drive_record, "drive record"),
                                                rec.times.mission_start, rec.times.mission_end)
        if m.drive_user_agent:
            rec.drive = measure_drive(self.run_dir / "telemetry.duckdb", m.drive_user_agent, rec.times.mission_start,
                                      rec.times.mission_end)
            rec.phases = phases_between(rec.drive.start, rec.drive.end, rec.times.mission_start, rec.times.mission_end)
            if rec.drive.problem:
                self.say(f"drive gate: {rec.drive.problem}")
        if log is not None:
            rec.artifacts.signal_log = str(log)
            rec.signals = signals_from_log_text(self._agent_text(workspace, m.signal_log, "signal log"))
        if rec.session and rec.phases and rec.phases.drive_start:
            ids = session_tree(data_dir, rec.session.root_session)
            rec.files_read_before_drive = files_read_before(data_dir, ids, rec.phases.drive_start)
        telemetry = self.run_dir / "telemetry.duckdb"
        if telemetry.exists():
            rec.artifacts.telemetry = str(telemetry)

    def _stop_services(self) -> None:
        services, self.services = self.services, None
        if services is not None:
            try:
                services.stop()
            except Exception as exc:  # never let it stand between us and destroy
                self.say(f"stopping the mission's services failed: {exc}")

    def _judge(self, result: RunResult) -> None:
        rec = self.record
        reasons = []
        if result.ended_by:
            reasons.append(f"the run was ended: {result.ended_by}")
        elif result.exit_code != 0:
            reasons.append(f"opencode exited {result.exit_code} ({'; '.join(result.errors[-1:]) or 'see stderr'})")
        if not rec.run.report_found:
            reasons.append(f"the agent wrote no report at {self.report_name}")
        if rec.session is None:
            reasons.append("no session found in the run's opencode store")
        if rec.drive is not None and rec.drive.problem:
            reasons.append(rec.drive.problem)  # the harness's drive gate: no row without a real drive
        reasons += self.untrusted  # a linked or oversized file the agent left: no row on it
        if reasons:
            rec.status, rec.reason, rec.stopped_at = Status.void, "; ".join(reasons), "run"
        else:
            rec.status, rec.reason, rec.stopped_at = Status.ok, None, None

    # -- destroy (always) --------------------------------------------------------------------
    def _destroy(self) -> None:
        rec = self.record
        self._stop_services()
        if self.collector is not None:
            try:
                self.collector.stop()
            except Exception as exc:  # never let log collection stand between us and destroy
                self.say(f"unit log collection failed: {exc}")
            rec.unit_death = self.collector.death
        if self.unit is None or self.stack is None:
            return
        stage = self.stage
        self.stage = "destroy"
        try:
            existed = self._destroy_with_retries()
            rec.times.destroyed = utcnow()
            self.say(f"destroyed {self.unit.name}" + ("" if existed else " (it had already exited)"))
        except Exception as exc:  # the unit may still bill: say so loudly, keep it in the ledger
            rec.status, rec.stopped_at = Status.fault, "destroy"
            rec.reason = f"{rec.reason + '; ' if rec.reason else ''}destroy failed: {exc} — still in the ledger"
            self.say(f"DESTROY FAILED for {self.unit.name}: {exc}; run `llms-benchmark destroy "
                     f"{rec.environment} {rec.key.preset}`")
        else:
            self.stage = stage
        self._copy_served_log()
        if rec.times.serve_start and rec.times.destroyed:
            hours = (rec.times.destroyed - rec.times.serve_start).total_seconds() / 3600
            rec.gpu_hours = round(hours * self.gpus, 4)
            if rec.serving is not None:
                rec.serving.gpu_cost_usd = gpu_cost(rec.gpu_hours, rec.serving.gpu_hourly_usd)

    def _destroy_with_retries(self, attempts: int = 3, pause_s: float = 2.0) -> bool:
        """A destroy that fails (an API hiccup, a process slow to die) is tried again; the
        last failure is raised and the unit stays in the ledger for the next command."""
        for attempt in range(1, attempts + 1):
            try:
                failpoint.hit("destroy")
                return destroy_unit(self.stack, self.unit, Ledger(self.root))
            except Exception as exc:  # noqa: BLE001 - retried, then raised
                if attempt == attempts:
                    raise
                self.say(f"destroy attempt {attempt} failed ({exc}); trying again")
                time.sleep(pause_s * attempt)
        raise AssertionError("unreachable")

    def _copy_served_log(self) -> None:
        served = self.unit.extra.get("served_log") if self.unit else None
        if served and Path(served).is_file():
            shutil.copy2(served, self.run_dir / "served.jsonl")
            self.record.artifacts.served_log = str(self.run_dir / "served.jsonl")


def launch_local(opts: LaunchOptions, say: Say) -> RunRecord:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return Launch(opts, say).run()
