"""A served unit's whole life, in one place: billing safety is not kept in copies.

    destroy_leftovers   units whose launch died (SIGKILL, power loss) go first
    claim               never a second unit of the same name on an environment
    UnitLife            plan (into the ledger before it exists), start, wait until ready,
                        destroy (retried; out of the ledger only once verified gone)
    lifetime            the context manager `launch`, `serve` and `load` share: SIGINT and
                        SIGTERM unwind to the destroy, and a second signal cannot cut it short

A unit is in the ledger before it is created, so even a SIGKILLed command leaves it
findable: the next command that serves destroys it first.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from harness.run import failpoint
from harness.errors import Interrupted, UserError
from harness.records.paths import RunPaths
from harness.run.preflight import Preflight
from harness.probe import unit_api_key
from harness.records.record import RunRecord, Status, utcnow
from harness.stacks.base import Stack, Unit, unit_name
from harness.stacks.ledger import Ledger
from harness.stacks.local_process import AGENT_MARKER_VAR, kill_marked
from harness.stacks.registry import get_stack
from harness.run.unitlog import UnitLogCollector, wait_ready

Say = Callable[[str], None]
__all__ = ["Interrupted", "UnitLife", "claim", "destroy_leftovers", "destroy_unit", "lifetime", "on_signals",
           "plan_unit", "raise_if_interrupted", "refuse_if_served", "start_unit"]


# -- signal guards --------------------------------------------------------------------------
@contextlib.contextmanager
def on_signals(handler) -> Iterator[None]:
    """Route SIGINT and SIGTERM to `handler` for the duration of the block."""
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


_raised: list[int] = []  # the signals raised as Interrupted inside the current `interruptible` block


def raise_interrupted(signum, _frame):
    """SIGINT and SIGTERM unwind to the `finally` that destroys."""
    _raised.append(signum)
    raise Interrupted(signum)


def raise_if_interrupted() -> None:
    """Raise again an Interrupted that something caught and dropped (a library's bare
    `except BaseException`, an exception raised in a `__del__` is printed and lost): the
    launch calls this between stages, so a signal is obeyed by the next stage at the latest."""
    if _raised:
        raise Interrupted(_raised[0])


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    _raised.clear()
    try:
        with on_signals(raise_interrupted):
            yield
    finally:
        _raised.clear()


# -- leftovers and the serve-once claim -------------------------------------------------------
def _owner_alive(unit: Unit) -> bool:
    owner = unit.extra.get("owner_pid")
    if not owner:
        return True  # served by hand with `serve`: not a leftover
    try:
        proc = psutil.Process(owner)
        # A zombie is dead: killed, its parent gone, and nobody reaped it (a container's init may never).
        return proc.create_time() == unit.extra.get("owner_started") and proc.status() != psutil.STATUS_ZOMBIE
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
    """The dead launch never wrote its ending: say in its records what happened (the run it
    served for, and with `--trials` the group's later trials; a trial that finished keeps its
    status) and what the serve billed: its life as the cloud reports it (created, see the
    stack's destroy) to the destroy now, on every trial's record (the serve is theirs together)."""
    first = RunPaths(Path(unit.extra.get("run_dir", "")))
    if not first.record.is_file():
        return
    destroyed = utcnow()
    dirs = [first.dir] + sorted(p.parent for p in first.dir.parent.glob(f"*/{first.record.name}")
                                if p.parent != first.dir)
    for path in dirs:
        paths = RunPaths(path)
        try:
            rec = RunRecord.load(paths.record)
        except (OSError, ValueError):
            continue
        if paths.dir != first.dir and (rec.trial is None or rec.trial.group != first.dir.name):
            continue
        if rec.times.end is None and not paths.collect_pending.is_file():
            rec.status, rec.stopped_at = Status.fault, rec.stopped_at or "killed"
            rec.reason = ("the launch process died without finishing (SIGKILL or crash); a later command "
                          "destroyed its unit")
            rec.times.end = destroyed
        # A trial whose mission finished keeps its pending collect (issue 61): `llms-benchmark collect`
        # or a matrix's resume runs it; it is never served again.
        if rec.times.destroyed is None:
            rec.times.destroyed = destroyed
        if rec.gpu_hours is None:
            rec.gpu_hours = leftover_gpu_hours(unit, rec, destroyed)
            if rec.serving is not None and rec.serving.gpu_hourly_usd is not None:
                rec.serving.gpu_cost_usd = round(rec.gpu_hours * rec.serving.gpu_hourly_usd, 4)
        rec.save(paths.dir)


def leftover_gpu_hours(unit: Unit, rec: RunRecord, destroyed) -> float:
    """A leftover's GPU-hours: from its creation as the cloud reports it (else the serve's start,
    whichever is earlier) to its destroy, on the GPUs its preflight found (one if it never got there)."""
    starts = [t for t in (rec.times.serve_start, _parse_time(unit.extra.get("created_at"))) if t is not None]
    if not starts:
        return 0.0
    gpus = 1 if rec.gpus is None and unit.stack == "azure" else (rec.gpus or 0)
    return round(max(0.0, (destroyed - min(starts)).total_seconds()) / 3600 * gpus, 6)


def _parse_time(text):
    from datetime import datetime, timezone

    if not text:
        return None
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def refuse_if_served(root: Path, environment: str, name: str) -> None:
    existing = Ledger(root).get(environment, name)
    if existing:
        raise UserError(
            f"{name} is already served on {environment} ({existing.base_url}); never a second unit",
            file=Ledger(root).path,
            fix=f"destroy it first: llms-benchmark destroy {environment} {existing.preset}",
        )


def claim(root: Path, pf: Preflight) -> None:
    """Serve once: refused while the preset's unit is in the ledger on that environment."""
    refuse_if_served(root, pf.env.name, unit_name(pf.preset.name))


# -- plan / start / destroy (the `destroy` command uses destroy_unit alone) -------------------
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


class UnitLife:
    """One unit from plan to destroy. `serve` plans and starts it and collects its log into
    `log_path`; `wait_ready` holds until it lists its model; `end` destroys it (see `lifetime`)."""

    def __init__(self, root: Path, say: Say, *, log_path: Path, owner: bool = True, run_dir: Path | None = None,
                 before_destroy: Callable[[], None] | None = None, destroy_attempts: int = 3,
                 destroy_pause_s: float = 2.0) -> None:
        self.root, self.say, self.log_path = root, say, log_path
        self.owner, self.run_dir, self.before_destroy = owner, run_dir, before_destroy
        self.destroy_attempts, self.destroy_pause_s = destroy_attempts, destroy_pause_s
        self.ledger = Ledger(root)
        self.stack: Stack | None = None
        self.unit: Unit | None = None
        self.collector: UnitLogCollector | None = None
        self.api_key: str | None = None  # in memory only (never recorded)
        self.existed: bool | None = None  # after a successful destroy: was it still there
        self.destroyed_at = None
        self.destroy_error: Exception | None = None
        self.late_signal: str | None = None  # SIGINT/SIGTERM that arrived while destroying

    def serve(self, pf: Preflight) -> Unit:
        self.stack = pf.stack
        self.unit = plan_unit(pf, self.ledger, owner=self.owner, run_dir=self.run_dir)
        self.unit = start_unit(pf, self.unit, self.ledger)
        self.collector = UnitLogCollector(pf.stack, self.unit, self.log_path)
        self.collector.start()
        return self.unit

    def wait_ready(self, on_wait=None) -> str | None:
        """The unit's API key, once GET /v1/models lists its served name."""
        self.api_key = unit_api_key(self.stack, self.unit)
        wait_ready(self.unit, self.stack.ready_timeout_s, self.collector, api_key=self.api_key, on_wait=on_wait)
        return self.api_key

    def stop_log(self) -> None:
        if self.collector is not None:
            try:
                self.collector.stop()
            except Exception as exc:  # never let log collection stand between us and destroy
                self.say(f"unit log collection failed: {exc}")

    def end(self) -> None:
        """Destroy whatever was served; a second signal meanwhile is noted, never obeyed.
        A failed destroy is said loudly and kept in `destroy_error` (the unit stays in the ledger)."""
        with on_signals(self._signal_during_destroy):
            if self.before_destroy is not None:
                self.before_destroy()
            self.stop_log()
            if self.unit is None or self.stack is None:
                return
            try:
                self.existed = self._destroy_with_retries()
                self.destroyed_at = utcnow()
                self.say(f"destroyed {self.unit.name}" + ("" if self.existed else " (it had already exited)"))
            except Exception as exc:  # the unit may still bill: say so loudly, keep it in the ledger
                self.destroy_error = exc
                self.say(f"DESTROY FAILED for {self.unit.name}: {exc}; run `llms-benchmark destroy "
                         f"{self.unit.environment} {self.unit.preset}`")

    def _signal_during_destroy(self, signum, _frame) -> None:
        self.late_signal = self.late_signal or signal.Signals(signum).name
        self.say(f"{signal.Signals(signum).name} received: finishing the destroy first")

    def _destroy_with_retries(self) -> bool:
        """A destroy that fails (an API hiccup, a process slow to die) is tried again, on the
        harness's one retry policy (`wire.retry`, `destroy_pause_s` apart); the last failure is
        raised and the unit stays in the ledger for the next command."""
        from harness.wire.retry import Retrier, Steady

        life = self

        class _Said:  # each retry said on the terminal, as the launch has always said it
            def retried(self, why: str, wait: float) -> None:
                life.say(f"destroy attempt {retrier.attempt - 1} failed ({why}); trying again")

            def given_up(self) -> None:
                pass

        retrier = Retrier(Steady(self.destroy_attempts, self.destroy_pause_s), time.sleep,
                          transient=lambda exc: str(exc) if isinstance(exc, Exception) else None, tally=_Said())
        for attempt in retrier:
            with attempt:
                failpoint.hit("destroy")
                existed = destroy_unit(self.stack, self.unit, self.ledger)
        return existed


@contextlib.contextmanager
def lifetime(life: UnitLife, *, keep: bool = False, raise_destroy_failure: bool = True) -> Iterator[UnitLife]:
    """The block runs with SIGINT/SIGTERM unwinding to the destroy; on the way out the unit is
    destroyed whatever happened (`keep`: only when the block failed — `serve` by hand).
    A failed destroy is raised unless the caller records it (`raise_destroy_failure=False`)."""
    try:
        with interruptible():
            yield life
    except BaseException:
        life.end()
        if life.destroy_error is not None and raise_destroy_failure:
            raise life.destroy_error
        raise
    if keep:
        life.stop_log()
        return
    life.end()
    if life.destroy_error is not None and raise_destroy_failure:
        raise life.destroy_error
