"""The matrix's loop: cells as launches, each its own process, as many at once as the engine
and `--parallel` allow, within the budget.

A cell is `llms-benchmark launch local ENV PRESET EFFORT --mission M --trials K --json` in a
session of its own (a cell's crash cannot take the matrix down; the launch keeps its own
serve-once claim, ledger entry, run folders and signal handling). The matrix

- caps how many run at once: `--parallel`, and on Azure the free GPUs of the quota read at
  preflight (`quota.py`); a quota full then holds every cell queued, the quota read again
  after a backoff (bounded); two cells of one preset never run together (one unit `vot-<preset>`);
- queues a cell Azure refused for quota or capacity (its record's reason says so; the folder
  moves to `.llms-benchmark/refused/`, out of git) and tries it again after a backoff that
  doubles up to `retry.backoff_max_s`, at most `retry.max_attempts` times; a launch that
  ended in a transient fault (ARM 5xx or throttling past the SDK's own retries, a revision
  never ready, a lost connection) the same way, at most `retry.transient_attempts` launches;
  any other fault is final at once. Each launch is an attempt in the state, its records kept;
- serves only the trials a cell still lacks: a trial whose record is finished (ok or void) is
  kept and counted, a resume or a retry launches `--trials <missing>` (one serve);
- holds the budget as a hard cap (`bound.py`): a cell starts only if what was spent (read
  from the records) plus the reserves of the cells in flight plus its bound (the whole
  serve, not just its missions) fit; once spent + its bound alone exceeds it, the cell is
  recorded as over budget. A running cell that would pass what is left to it is asked to
  stop after its report (the `stop` path), and interrupted (it destroys its unit) before
  its serve plus its destroy would pass the budget;
- writes the state after every change; on SIGINT/SIGTERM it forwards the signal to every
  launch in flight (each destroys its unit), waits for them, records each cell, and exits
  128+N. The launches die with it if it is killed (PR_SET_PDEATHSIG: SIGTERM, same path);
  a launch that dies on its own has its unit swept and its records closed at once.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from harness.matrix.bound import CellBound, estimate
from harness.matrix.plan import MatrixPlan
from harness.matrix.resume import records_of
from harness.matrix.spend import complete_pending, is_finished, kept_trials, live_hours, load_records, serve_hours, settle_state
from harness.matrix.state import Attempt, Cell, CellStatus, MatrixState, StateFolder
from harness.records.paths import ProjectPaths
from harness.records.record import RunRecord, Status, utcnow

Say = Callable[[str], None]
# A stand-in for `-m harness.cli` (a script path), for tests and demos: the cell's argv is
# [python, <this>, "launch", "local", ...]. Unset: the real console entry.
CELL_ENTRY_VAR = "LLMS_BENCHMARK_MATRIX_CELL"
TICK_S = 0.25
DRAIN_TIMEOUT_S = 20 * 60  # a launch's destroy is bounded at 15 minutes (azure) plus its retries
# How early a running cell is interrupted before its serve plus its destroy would pass what is
# left of the budget: the loop's tick, reading the records, the signal reaching the mission.
STOP_LEAD_S = 2.0
# What Azure says when it has no room for one more GPU app: a refusal to queue, not a fault.
QUOTA_REFUSAL = re.compile(
    r"quota|QuotaExceeded|InsufficientQuota|capacity|cannot take another replica|SkuNotAvailable|"
    r"ManagedEnvironment\w*Capacity", re.IGNORECASE)
# A fault another launch may not meet: ARM's 5xx and throttling (after the SDK's own retries),
# an LRO or a revision that never finished or became ready, a connection lost on the way.
TRANSIENT_FAULT = re.compile(
    r"HTTP (5\d\d|429)\b|\b(InternalServerError|ServiceUnavailable|BadGateway|GatewayTimeout|TooManyRequests|"
    r"ServerTimeout|ServerBusy)\b|did not list '[^']*' on /v1/models within|did not finish in time|"
    r"never became ready|\b(ConnectionError|ConnectionResetError|ConnectionRefusedError|ConnectionAbortedError|"
    r"RemoteDisconnected|RemoteProtocolError|ReadTimeout|ConnectTimeout|ServiceRequestError|"
    r"ServiceResponseError|IncompleteRead)\b|connection (was )?(lost|reset|closed|aborted)", re.IGNORECASE)
QUOTA_FULL = "queued: the GPU quota is full"
# Serve-once refused the launch: another launch (another matrix) serves the same preset right now.
HELD_ELSEWHERE = re.compile(r"(is already served on \S+|already exists in \S+ \(served, and billing\)).*never a second unit")


def cell_bound_usd(plan: MatrixPlan, cap_minutes: float, price: float | None, gpus: int = 1) -> float:
    """The missions' part of a cell's bound (the whole bound: `bound.py`)."""
    return cap_minutes / 60 * plan.trials * gpus * (price or 0.0)


def elapsed_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def backoff_s(plan: MatrixPlan, tries: int) -> float:
    """The wait before try `tries + 1`: doubled each time, capped."""
    return min(plan.retry.backoff_s * 2 ** max(0, tries - 1), plan.retry.backoff_max_s)


def _pdeathsig() -> Callable[[], None] | None:
    """In the child, before exec: SIGTERM when the matrix dies (Linux); no threads run here."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return arm


@dataclass
class Running:
    cell: Cell
    attempt: Attempt
    proc: subprocess.Popen
    announce: Path
    out: Path
    bound: CellBound
    started: float
    signalled: bool = False
    budget_stop: str | None = None  # why the matrix interrupted it for the budget
    stop_asked: set[str] = field(default_factory=set)  # trials asked to stop after their report


class MatrixRun:
    def __init__(self, root: Path, plan: MatrixPlan, folder: StateFolder, state: MatrixState, *, cap: int,
                 cap_minutes: float, say: Say, view=None, read_quota=None, quota_full=None) -> None:
        self.root, self.plan, self.folder, self.state = root, plan, folder, state
        self.cap, self.say, self.view = cap, say, view
        self.cap_minutes = cap_minutes
        self.running: dict[str, Running] = {}
        self.stop_signal: int | None = None
        self.paths = ProjectPaths(root)
        self._deathsig = _pdeathsig()
        self._bounds: dict[tuple[str, int], CellBound] = {}
        self.t0 = time.monotonic()
        # The quota full at preflight: every cell waits, the quota read again at each backoff.
        self.read_quota = read_quota
        self.gate_until: float | None = None
        self.gate_looks = 0
        self.last_quota = quota_full
        if quota_full is not None:
            self._hold_for_quota(quota_full)

    # -- signals ---------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        else:
            self.say(f"{signal.Signals(signum).name} again: still waiting for the launches to destroy their units")

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.save()
            while True:
                self._reap()
                if self.stop_signal is not None:
                    self._drain()
                    break
                self._guard_budget()
                self._start_what_fits()
                self._show()
                if not self.running and not any(self._startable(c) or c.status == CellStatus.queued
                                                 for c in self.state.cells):
                    break
                time.sleep(TICK_S)
        finally:
            if self.running:  # an exception in the loop itself: never leave a launch unwatched
                self.stop_signal = self.stop_signal or signal.SIGTERM
                self._drain()
            for s, h in previous.items():
                signal.signal(s, h)
        settle_state(self.root, self.state)  # the records are the truth: the state agrees with them
        self._show(final=True)
        if self.stop_signal is not None:
            self.state.interrupted = signal.Signals(self.stop_signal).name
            self.save()
            return 128 + self.stop_signal
        self.state.interrupted = None
        self.save()
        return 0 if all(c.status == CellStatus.done for c in self.state.cells) else 1

    def save(self) -> None:
        self.folder.save(self.state)

    def _startable(self, cell: Cell) -> bool:
        return cell.status in (CellStatus.pending, CellStatus.interrupted)

    def _due(self, cell: Cell) -> bool:
        if self._startable(cell):
            return True
        return cell.status == CellStatus.queued and (cell.retry_at is None or cell.retry_at <= utcnow())

    # -- the budget --------------------------------------------------------------------------
    @property
    def price(self) -> float:
        return self.state.gpu_hourly_usd or 0.0

    def missing(self, cell: Cell) -> int:
        return max(0, self.plan.trials - cell.trials_finished)

    def bound(self, cell: Cell) -> CellBound:
        key = (cell.preset, self.missing(cell))
        if key not in self._bounds:
            self._bounds[key] = estimate(self.root, self.plan.environment, cell.preset, key[1], self.cap_minutes,
                                         self.plan.serve_costs)
        return self._bounds[key]

    def live_usd(self, run: Running) -> float:
        """What the cell's serve has billed so far (from its record's serve start)."""
        first = run.attempt.run_ids[:1]
        return live_hours(load_records(self.paths, first)) * self.price if first else 0.0

    def tail_usd(self, run: Running) -> float:
        """What a cell in flight still bills once told to stop: its destroy, and while its unit is
        not ready yet, the rest of its create too (a cloud that is creating an app refuses its
        delete until the create ends: the create is paid to its end either way)."""
        rate = run.bound.gpus * self.price / 3600
        first = run.attempt.run_ids[:1]
        records = load_records(self.paths, first) if first else []
        creating = bool(records) and records[0].times.serve_start is not None and records[0].times.ready is None
        if not creating:
            return run.bound.tail_usd(self.price)
        created_s = live_hours(records[:1]) * 3600 / max(run.bound.gpus, 1)
        return run.bound.tail_usd(self.price) + max(0.0, run.bound.cold_start_s - created_s) * rate

    def reserve_usd(self, run: Running) -> float:
        """What a cell in flight may still bill in all: its bound, or more once it passed it."""
        return max(run.bound.usd(self.price), self.live_usd(run) + self.tail_usd(run))

    def spent_usd(self) -> float:
        """Ended launches' (from their records) plus the serves running now, so far."""
        return self.state.spent_usd() + sum(self.live_usd(r) for r in self.running.values())

    def _budget_allows(self, cell: Cell) -> bool:
        budget = self.state.budget_usd
        if budget is None:
            return True
        b = self.bound(cell)
        spent, bound = self.state.spent_usd(), b.usd(self.price)
        if spent + bound > budget + 1e-9:
            cell.status = CellStatus.over_budget
            cell.retry_at = None
            cell.reason = (f"not started: spent ${spent:.2f} + this cell's bound ${bound:.2f} ({b.describe(self.price)}) "
                           f"exceeds the budget ${budget:.2f}")
            self.say(f"{cell.id}: {cell.reason}")
            self.save()
            return False
        in_flight = sum(self.reserve_usd(r) for r in self.running.values())
        return spent + in_flight + bound <= budget + 1e-9  # else: wait for a cell in flight to end

    def _guard_budget(self) -> None:
        """A running cell never takes the matrix past its budget: asked to stop after its report
        when another whole trial would not fit what is left to it, interrupted (it destroys its
        unit) before its serve plus its destroy would pass it."""
        budget = self.state.budget_usd
        if budget is None or not self.running:
            return
        spent = self.state.spent_usd()
        live = {cid: self.live_usd(r) for cid, r in self.running.items()}
        tails = {cid: self.tail_usd(r) for cid, r in self.running.items()}
        reserve = {cid: max(r.bound.usd(self.price), live[cid] + tails[cid]) for cid, r in self.running.items()}
        for cid, run in self.running.items():
            if run.signalled:
                continue
            left = budget - spent - sum(v for k, v in reserve.items() if k != cid)
            rate = run.bound.gpus * self.price / 3600
            tail = tails[cid]
            if live[cid] + tail + STOP_LEAD_S * rate >= left:
                run.budget_stop = (f"stopped before the budget ${budget:.2f} was passed: its serve had billed "
                                   f"${live[cid]:.2f} of the ${left:.2f} left to it, the rest of its create and "
                                   f"its destroy reserved ${tail:.2f}")
                self._interrupt(run, "the budget")
                reserve[cid] = live[cid] + tail
            elif live[cid] + tail + (STOP_LEAD_S + run.bound.trial_s) * rate > left:
                self._ask_stop(run, left)

    def _ask_stop(self, run: Running, left: float) -> None:
        """The `stop` path: its trial running now ends once its report is persisted."""
        first = run.attempt.run_ids[:1]
        for rec in records_of(self.paths, first[0]) if first else []:
            if rec.times.end is None and rec.run_id not in run.stop_asked:
                paths = self.paths.run(rec.run_id)
                if paths.dir.is_dir():
                    paths.stop_request.write_text("stop after the report: the matrix's budget\n")
                    run.stop_asked.add(rec.run_id)
                    self.say(f"{run.cell.id}: another trial would not fit the ${left:.2f} left to it; run "
                             f"{rec.run_id} stops once its report is persisted")

    def _interrupt(self, run: Running, why: str) -> None:
        run.signalled = True
        self.say(f"{run.cell.id}: interrupting its launch (pid {run.proc.pid}) for {why}; it destroys its unit")
        try:
            os.killpg(run.proc.pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass

    # -- the quota full at preflight -------------------------------------------------------------
    def _hold_for_quota(self, quota) -> None:
        self.last_quota = quota
        self.gate_looks += 1
        waiting = [c for c in self.state.cells if self._startable(c) or
                   (c.status == CellStatus.queued and (c.reason or "").startswith(QUOTA_FULL))]
        if self.gate_looks > self.plan.retry.max_attempts:
            self.gate_until = None
            for cell in waiting:
                cell.status, cell.retry_at = CellStatus.gave_up, None
                cell.reason = f"the GPU quota stayed full ({quota.describe()}) through {self.gate_looks - 1} looks"
            self.say(f"gave up waiting for the GPU quota: {quota.describe()}")
            self.save()
            return
        wait = backoff_s(self.plan, self.gate_looks)
        self.gate_until = time.monotonic() + wait
        for cell in waiting:
            cell.status, cell.retry_at = CellStatus.queued, utcnow() + timedelta(seconds=wait)
            cell.reason = (f"{QUOTA_FULL} ({quota.describe()}); read again in {wait:.0f}s "
                           f"(look {self.gate_looks} of {self.plan.retry.max_attempts})")
        self.say(f"{QUOTA_FULL} ({quota.describe()}): {len(waiting)} cell(s) wait; read again in {wait:.0f}s")
        self.save()

    def _quota_gate_open(self) -> bool:
        if self.gate_until is None:
            return True
        if time.monotonic() < self.gate_until:
            return False
        try:
            quota = self.read_quota() if self.read_quota is not None else None
        except Exception as exc:  # noqa: BLE001 - an ARM hiccup mid-matrix is one more look, not the end
            self.say(f"could not read the GPU quota again ({getattr(exc, 'message', exc)}); the cells stay queued")
            quota = self.last_quota
        if quota is not None and quota.free < 1:
            self._hold_for_quota(quota)
            return False
        self.gate_until = None
        if quota is not None:
            self.cap = min(self.plan.parallel, quota.free)
            self.state.parallel, self.state.parallel_why = self.cap, f"the GPU quota: {quota.describe()}"
            self.say(f"GPU quota: {quota.describe()}; the queued cells start")
        for cell in self.state.cells:
            if cell.status == CellStatus.queued and (cell.reason or "").startswith(QUOTA_FULL):
                cell.status, cell.retry_at, cell.reason = CellStatus.pending, None, None
        self.save()
        return True

    # -- starting --------------------------------------------------------------------------
    def _start_what_fits(self) -> None:
        if not self._quota_gate_open():
            return
        busy_presets = {r.cell.preset for r in self.running.values()}
        for cell in self.state.cells:
            if len(self.running) >= self.cap:
                return
            if not self._due(cell) or cell.preset in busy_presets:
                continue
            if not self._budget_allows(cell):
                continue
            self._start(cell)
            busy_presets.add(cell.preset)

    def _start(self, cell: Cell) -> None:
        from harness.run.inputs import ANNOUNCE_VAR

        index = len(cell.attempts) + 1
        trials = self.missing(cell)
        bound = self.bound(cell)
        self.folder.cells.mkdir(parents=True, exist_ok=True)
        stem = f"{cell.id}-{index}"
        log, out, announce = (self.folder.cells / f"{stem}.log", self.folder.cells / f"{stem}.json",
                              self.folder.cells / f"{stem}.run-id")
        announce.unlink(missing_ok=True)
        entry = os.environ.get(CELL_ENTRY_VAR)
        argv = [sys.executable, *([entry] if entry else ["-m", "harness.cli"]), "launch", "local",
                self.plan.environment, cell.preset, cell.effort, "--mission", self.plan.mission,
                "--trials", str(trials), "--json",
                *(["--probe-long-tokens", str(self.plan.probe_long_tokens)] if self.plan.probe_long_tokens else []),
                *(["--no-sandbox"] if self.plan.no_sandbox else [])]
        env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(self.root), ANNOUNCE_VAR: str(announce),
               "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as err_fh, open(out, "wb") as out_fh:
            proc = subprocess.Popen(argv, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=out_fh,
                                    stderr=err_fh, start_new_session=True, preexec_fn=self._deathsig)
        attempt = Attempt(index=index, started=utcnow(), pid=proc.pid, log=self._rel(log))
        cell.attempts.append(attempt)
        cell.status, cell.retry_at, cell.reason = CellStatus.running, None, None
        self.running[cell.id] = Running(cell, attempt, proc, announce, out, bound, time.monotonic())
        kept = cell.trials_finished
        self.say(f"{cell.id}: launch {index} started (pid {proc.pid}): {trials} trial(s)"
                 + (f", {kept} kept from earlier launches" if kept else "")
                 + (f"; bound ${bound.usd(self.price):.2f}" if self.state.budget_usd is not None else ""))
        self.save()

    # -- watching --------------------------------------------------------------------------
    def _reap(self) -> None:
        for cell_id, run in list(self.running.items()):
            if not run.attempt.run_ids and run.announce.is_file():
                run.attempt.run_ids = [run.announce.read_text().strip()]
                self.save()
            if run.proc.poll() is None:
                continue
            del self.running[cell_id]
            self._ended(run)
            self._bounds.clear()  # a finished serve is history the next bound reads
            self.save()

    def _ended(self, run: Running) -> None:
        cell, attempt, rc = run.cell, run.attempt, run.proc.returncode
        attempt.ended, attempt.exit_code, attempt.pid = utcnow(), rc, None
        records = self._records(run)
        if any(r.times.destroyed is None and r.times.serve_start is not None for r in records):
            # The launch died without its destroy (SIGKILL, a crash): its unit is swept now, and
            # its records closed with what the unit billed, before anything else starts.
            from harness.run.units import destroy_leftovers

            for name in destroy_leftovers(self.root, self.say):
                self.say(f"{cell.id}: swept {name}, left by its launch (exit code {rc})")
            records = self._records(run, fresh=True)
        # A trial that finished its mission before its launch died is collected now, never served again.
        records = complete_pending(self.paths, records, self.say)
        if records:
            attempt.run_ids = [r.run_id for r in records]
            attempt.gpu_hours = serve_hours(records)
            attempt.finished = [r.run_id for r in records if is_finished(r)]
        bad = next((r for r in records if r.status != Status.ok), None)
        reason = (bad.reason if bad is not None else None) or (None if rc == 0 else self._tail(run))
        missing = self.missing(cell)
        if run.budget_stop is not None:
            cell.status, cell.reason = CellStatus.over_budget, run.budget_stop + (
                f"; {cell.trials_finished} of {self.plan.trials} trial(s) kept" if cell.trials_finished else "")
        elif missing == 0:
            kept = kept_trials(self.root, cell)
            void = next((r for r in kept if r.status != Status.ok), None)
            cell.status = CellStatus.done if void is None else CellStatus.void
            cell.reason = None if void is None else (void.reason or "a trial made no row")
        elif run.signalled:
            cell.status, cell.reason = CellStatus.interrupted, f"interrupted ({reason})" if reason else "interrupted"
        elif rc == 3 and reason and QUOTA_REFUSAL.search(reason) and (bad is None or bad.stopped_at in (None, "serve")):
            self._queue(cell, attempt, reason)
            return
        elif rc == 3 and reason and TRANSIENT_FAULT.search(reason):
            self._retry(cell, attempt, reason)
            return
        elif rc == 2 and reason and HELD_ELSEWHERE.search(reason):
            self._held(cell, attempt, reason)
            return
        elif rc < 0:  # the launch was killed (OOM killer, a stray kill): its unit is swept above
            self._retry(cell, attempt, f"the launch process was killed by {_signal_name(-rc)}")
            return
        else:
            cell.status = {1: CellStatus.void, 2: CellStatus.refused}.get(rc, CellStatus.fault)
            cell.reason = reason or f"the launch process ended with exit code {rc}"
            if rc not in (1, 2, 3):
                cell.reason = f"the launch process ended with exit code {rc}: {cell.reason}"
        attempt.reason = cell.reason
        self.say(f"{cell.id}: {cell.status.value}" + (f" — {cell.reason}" if cell.reason else "")
                 + f" ({elapsed_text(time.monotonic() - run.started)})")

    def _retry(self, cell: Cell, attempt: Attempt, reason: str) -> None:
        """A transient fault: launched again after a backoff (its missing trials only), bounded."""
        attempt.reason = f"transient: {reason}"
        faults, most = cell.transient_faults, self.plan.retry.transient_attempts
        if faults >= most:
            cell.status, cell.retry_at = CellStatus.fault, None
            cell.reason = f"a transient fault in each of {faults} launches; last: {reason}"
            self.say(f"{cell.id}: fault — {cell.reason}")
            return
        wait = backoff_s(self.plan, faults)
        cell.status, cell.retry_at = CellStatus.queued, utcnow() + timedelta(seconds=wait)
        cell.reason = (f"queued: a transient fault ({reason}); launch {len(cell.attempts) + 1} in {wait:.0f}s "
                       f"(at most {most})")
        self.say(f"{cell.id}: {cell.reason}")

    def _held(self, cell: Cell, attempt: Attempt, reason: str) -> None:
        """Another launch (another matrix, a hand-run `launch`) serves this preset now: serve-once
        refused it, nothing was served. Queued until that serve ends (issue 61), bounded as a quota
        refusal is; its refused folder goes where a refusal's goes."""
        attempt.reason = f"held: {reason}"
        for run_id in attempt.run_ids:
            source = self.paths.run(run_id).dir
            if source.is_dir():
                self.paths.refused.mkdir(parents=True, exist_ok=True)
                os.replace(source, self.paths.refused / run_id)
        if cell.holds >= self.plan.retry.max_attempts:
            cell.status, cell.retry_at = CellStatus.gave_up, None
            cell.reason = f"its preset was served by another launch at each of {cell.holds} tries; last: {reason}"
            self.say(f"{cell.id}: gave up — {cell.reason}")
            return
        wait = backoff_s(self.plan, cell.holds)
        cell.status, cell.retry_at = CellStatus.queued, utcnow() + timedelta(seconds=wait)
        cell.reason = f"queued: another launch serves its preset ({reason}); next try in {wait:.0f}s"
        self.say(f"{cell.id}: {cell.reason}")

    def _queue(self, cell: Cell, attempt: Attempt, reason: str) -> None:
        attempt.reason = f"quota: {reason}"
        # A refusal is not a run: its folders go where a launch puts a refused one, out of git
        # (`.llms-benchmark/refused/`); its GPU-hours, if any, stay counted on the attempt.
        for run_id in attempt.run_ids:
            source = self.paths.run(run_id).dir
            if source.is_dir():
                self.paths.refused.mkdir(parents=True, exist_ok=True)
                os.replace(source, self.paths.refused / run_id)
        refusals = cell.quota_refusals
        if refusals >= self.plan.retry.max_attempts:
            cell.status, cell.retry_at = CellStatus.gave_up, None
            cell.reason = f"refused for quota or capacity {refusals} times; last: {reason}"
            self.say(f"{cell.id}: gave up — {cell.reason}")
            return
        wait = backoff_s(self.plan, refusals)
        cell.status, cell.retry_at = CellStatus.queued, utcnow() + timedelta(seconds=wait)
        cell.reason = f"queued: Azure refused it for quota or capacity ({reason}); next try in {wait:.0f}s"
        self.say(f"{cell.id}: {cell.reason}")

    def _records(self, run: Running, fresh: bool = False) -> list[RunRecord]:
        """The launch's records: from its `--json` output, else found by its announced run id
        (`fresh`: always from the run folders, as a sweep left them)."""
        if not fresh:
            try:
                data = json.loads(run.out.read_text(encoding="utf-8") or "null")
                items = data if isinstance(data, list) else [data] if isinstance(data, dict) else []
                if items:
                    return [RunRecord.model_validate(item) for item in items]
            except (OSError, ValueError):
                pass
        if not run.attempt.run_ids and run.announce.is_file():
            run.attempt.run_ids = [run.announce.read_text().strip()]
        first = run.attempt.run_ids[0] if run.attempt.run_ids else None
        return records_of(self.paths, first) if first else []

    def _tail(self, run: Running) -> str | None:
        try:
            lines = [ln for ln in Path(self.root / (run.attempt.log or "")).read_text(errors="replace").splitlines()
                     if ln.strip()]
        except OSError:
            return None
        return lines[-1].strip()[:400] if lines else None

    # -- stopping --------------------------------------------------------------------------
    def _drain(self) -> None:
        """Every launch in flight gets the signal (it destroys its unit), then is waited for."""
        name = signal.Signals(self.stop_signal).name
        for run in self.running.values():
            if not run.signalled:
                run.signalled = True
                self.say(f"{run.cell.id}: {name} forwarded to its launch (pid {run.proc.pid}); destroying its unit")
                try:
                    os.killpg(run.proc.pid, signal.SIGINT)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.running and time.monotonic() < deadline:
            self._reap()
            self._show()
            time.sleep(TICK_S)
        for run in self.running.values():  # still destroying when we gave up: the ledger keeps it
            run.cell.status = CellStatus.interrupted
            run.cell.reason = (f"its launch (pid {run.proc.pid}) was still destroying when the matrix stopped "
                               "waiting; the unit stays in the ledger until a later command sweeps it")
        self.save()

    # -- the view ----------------------------------------------------------------------------
    def live_cost(self, cell: Cell) -> float:
        """The cell's GPU $ so far: ended launches', plus the one running now since its serve began."""
        run = self.running.get(cell.id)
        return cell.gpu_hours * self.price + (self.live_usd(run) if run is not None else 0.0)

    def elapsed(self, cell: Cell) -> float:
        run = self.running.get(cell.id)
        if run is not None:
            return time.monotonic() - run.started
        return sum(((a.ended or utcnow()) - a.started).total_seconds() for a in cell.attempts)

    def _show(self, final: bool = False) -> None:
        if self.view is not None:
            self.view(self, final)

    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)
