"""The server's pace while opencode runs, read from the server itself, so that a stall is
named by what stalled (issue 47): "prefill at 0.6 tok/s, the probe measured 71.8 here: the
machine is too busy or too slow for this preset", never a parser blamed for a slow box.

Each reading takes the server's own counters (`/metrics`: prompt and generated tokens,
requests running), the prompt-processing progress llama.cpp logs at trace verbosity (its
`/metrics` prompt counter moves only once a prompt is done: a long prefill shows only in
the log), and how many cores other processes kept busy. `explain()` turns the readings of
the last window into one sentence and a cause.

Every reading (and every retune, `note`) is also a line of the run's pace timeline
(`pace.jsonl`): when, the decode and prefill pace since the reading before, requests running,
the cores others wanted, the threads serving. `fall()` reads it back as the sentence a failed
run's reason carries (issue 62): "decode fell from 15.4 to 0.4 tok/s at 10:14:30 while other
processes wanted 1.0 core; threads 2 kept".

The thread is bounded: one reading every `interval_s`, at most `max_readings` kept (and
written).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.load.metrics import scrape
from harness.records.record import Probe
from harness.stacks import cpu_threads
from harness.stacks.cpu_threads import FREE_SHARE

# llama-server at -lv 4: "... prompt processing, n_tokens =    512, progress = 0.41, t = ..." (this build;
# others write "prompt processing progress, [n_past = N, ]n_tokens = N, batch.n_tokens = N, progress = 0.41"). Our own server's log, never the agent's text.
_PROGRESS = re.compile(rb"prompt processing(?: progress)?, (?:n_past = \d+, )?n_tokens = +(\d+)[^\n]{0,80}?progress = ([0-9.]+)")
LOG_READ_CAP = 4 << 20  # bytes read from the log per reading
SLOW_SHARE = 0.25  # below a quarter of the pace the probe measured: the box, not the model
# llama.cpp counts the tokens it predicted only when a request ends (a 90 s answer reads 0 tok/s for
# 90 s); its decode calls count as they happen: one a token for each busy slot.
DECODE_STEPS, SLOTS_PER_DECODE = "llamacpp:n_decode_total", "llamacpp:n_busy_slots_per_decode"
FALL_SHARE = 0.5  # a decode below half the reference, held FALL_READINGS readings in a row, fell
FALL_READINGS = 3


@dataclass
class Reading:
    t: float  # monotonic
    prompt_total: float | None
    generated_total: float | None
    running: float | None  # requests running or waiting
    prefilled: int  # prompt tokens llama.cpp logged as processed so far (0 elsewhere)
    prefill_progress: float | None  # the last progress fraction logged, None if none yet
    busy_others: float | None
    wall: float = 0.0  # time.time() of the reading
    threads: int | None = None  # the server's threads then (llama.cpp)
    decode_tps: float | None = None  # tokens generated per second since the reading before
    decode_steps: float | None = None  # llama.cpp's decode calls so far (they count mid-request)
    prefilling: bool = False  # prompt tokens were processed since the reading before


@dataclass
class Diagnosis:
    cause: str  # "slow" | "stuck" | "prefill" | "decode" | "idle" | "unknown"
    text: str

    @property
    def box_too_slow(self) -> bool:
        return self.cause == "slow"


class PaceMonitor:
    def __init__(self, base_url: str, *, api_key: str | None = None, log_path: Path | None = None,
                 probe: Probe | None = None, reference: Probe | None = None,
                 server_pid: Callable[[], int | None] = lambda: None,
                 interval_s: float = 5.0, max_readings: int = 2000,
                 on_reading: Callable[[Reading], None] | None = None,
                 timeline: Path | None = None, threads: Callable[[], int | None] = lambda: None) -> None:
        self.base_url, self.api_key, self.log_path = base_url, api_key, log_path
        self.probe, self.reference, self.server_pid = probe, reference, server_pid
        self.interval_s = interval_s
        self.readings: deque[Reading] = deque(maxlen=max_readings)
        self.on_reading = on_reading
        self.timeline, self.threads, self.max_readings, self._written = timeline, threads, max_readings, 0
        self.notes: list[dict] = []  # retunes, as `note` was told them
        self._offset = log_path.stat().st_size if log_path and log_path.is_file() else 0
        self._prefilled, self._last_n, self._progress = 0, 0, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> PaceMonitor:
        self.read()
        self._thread = threading.Thread(target=self._loop, name="server-pace", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                reading = self.read()
                if self.on_reading is not None:
                    self.on_reading(reading)
            except Exception:  # noqa: BLE001 - a reading that fails never ends the run
                continue

    # -- one reading ---------------------------------------------------------------------
    def _read_log(self) -> None:
        if self.log_path is None:
            return
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read(LOG_READ_CAP)
        except OSError:
            return
        cut = data.rfind(b"\n") + 1  # whole lines only; the rest next time
        self._offset += cut
        for m in _PROGRESS.finditer(data[:cut]):
            n, progress = int(m[1]), float(m[2])
            # n_tokens counts up within one prompt and starts again with the next one.
            self._prefilled += n - self._last_n if n >= self._last_n else n
            self._last_n, self._progress = n, progress

    def read(self) -> Reading:
        snap = scrape(self.base_url, api_key=self.api_key, timeout=5.0)
        busy = None
        try:
            pid = self.server_pid()
            busy = cpu_threads.busy_cores(0.5, exclude=(os.getpid(), *((pid,) if pid else ())))
        except OSError:
            pass
        try:
            threads = self.threads()
        except Exception:  # noqa: BLE001 - a stack that cannot say
            threads = None
        with self._lock:
            self._read_log()
            reading = Reading(time.monotonic(), snap.prompt_tokens_total if snap else None,
                              snap.generation_tokens_total if snap else None, snap.busy if snap else None,
                              self._prefilled, self._progress, busy, wall=time.time(), threads=threads,
                              decode_steps=snap.raw.get(DECODE_STEPS) if snap else None)
            before = self.readings[-1] if self.readings else None
            if before is not None:
                reading.decode_tps = _decode_rate(before, reading, snap.raw.get(SLOTS_PER_DECODE) if snap else None)
                reading.prefilling = (reading.prefilled > before.prefilled
                                      or (_grew(before.prompt_total, reading.prompt_total) or 0) > 0
                                      or (reading.prefill_progress is not None and reading.prefill_progress < 1.0))
            self.readings.append(reading)
            self._write({"at": _clock(reading.wall, full=True), "decode_tps": reading.decode_tps,
                         "prefilling": reading.prefilling,
                         "generated_total": reading.generated_total, "prompt_total": reading.prompt_total,
                         "running": reading.running, "others_want_cores": busy, "threads": threads})
        return reading

    def note(self, event: dict) -> None:
        """A retune (or a retune held back), on the timeline beside the readings."""
        with self._lock:
            self.notes.append({"at_wall": time.time(), **event})
            self._write({"at": _clock(time.time(), full=True), **event})

    def _write(self, line: dict) -> None:
        if self.timeline is None or self._written >= self.max_readings + 50:
            return
        try:
            with open(self.timeline, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
            self._written += 1
        except OSError:
            self.timeline = None  # a timeline that cannot be written never ends the run

    def fall(self) -> str | None:
        """The decode's fall, if it fell: below FALL_SHARE of the reference (the best of the probe
        and this machine's best probe of the preset) for FALL_READINGS readings in a row while a
        request ran; when, to what, what others wanted then, and what the threads did."""
        ref = max((v for v in self._ref("decode_short_tps") if v), default=None)
        with self._lock:
            readings, notes = list(self.readings), list(self.notes)
        if not ref:
            return None
        def slow(reading: Reading) -> bool:
            return ((reading.running or 0) > 0 and not reading.prefilling and reading.decode_tps is not None
                    and reading.decode_tps < FALL_SHARE * ref)

        run: list[Reading] = []
        for i, reading in enumerate(readings):
            run = [*run, reading] if slow(reading) else []
            if len(run) >= FALL_READINGS:
                for later in readings[i + 1:]:  # the whole slow stretch, for its pace
                    if not slow(later):
                        break
                    run.append(later)
                break
        else:
            return None
        first = run[0]
        low = statistics.median(r.decode_tps for r in run)
        wanted = [r.busy_others for r in run if r.busy_others is not None]
        text = f"decode fell from {ref:g} to {low:.2f} tok/s at {_clock(first.wall)}"
        if wanted:
            cores = sum(wanted) / len(wanted)
            text += f" while other processes wanted {cores:.1f} core{'s' if round(cores, 1) != 1 else ''}"
        retunes = [n for n in notes if n.get("retune") and n["at_wall"] >= first.wall]
        if retunes:
            text += "; " + ", ".join(f"threads {n['retune']} at {_clock(n['at_wall'])}" for n in retunes[:4])
        elif first.threads is not None:
            held_back = [n for n in notes if n.get("held") and n["at_wall"] >= first.wall]
            text += f"; threads {first.threads} kept" + (f" ({held_back[-1]['held']})" if held_back else "")
        return text

    # -- what the last window shows -------------------------------------------------------
    def explain(self, window_s: float, fresh: bool = True) -> Diagnosis:
        if fresh:
            self.read()
        with self._lock:
            readings = list(self.readings)
        if len(readings) < 2:
            return Diagnosis("unknown", "the server's progress was not readable")
        last = readings[-1]
        first = next((r for r in readings if r.t >= last.t - window_s), readings[0])
        first = first if first is not last else readings[-2]
        span = max(last.t - first.t, 1e-3)
        prompt = max(_grew(first.prompt_total, last.prompt_total) or 0, last.prefilled - first.prefilled)
        generated = _grew(first.generated_total, last.generated_total) or 0
        busy = [r.busy_others for r in readings if r.t >= first.t and r.busy_others is not None]
        usable, _ = cpu_threads.usable_cores()
        load = (f"other processes kept {sum(busy) / len(busy):.1f} of {usable:g} cores busy"
                if busy else "the box's load was not readable")
        prefilling = last.prefill_progress is not None and last.prefill_progress < 1.0 and (last.running or 0) > 0
        if prompt > 0 or prefilling:
            rate = prompt / span
            ref = self._ref("prefill_tps")
            what = f"the server was prefilling: {prompt:,.0f} prompt tokens in {span:.0f} s ({rate:.1f} tok/s{_say(ref)})"
            if last.prefill_progress is not None and last.prefill_progress < 1.0:
                what += f", {last.prefill_progress:.0%} of its prompt done"
            return self._judge("prefill", rate, ref, what, load)
        if generated > 0:
            rate = generated / span
            ref = self._ref("decode_short_tps")
            what = f"the server generated {generated:,.0f} tokens in {span:.0f} s ({rate:.1f} tok/s{_say(ref)})"
            return self._judge("decode", rate, ref, what, load)
        if (last.running or 0) > 0:
            what = f"the server held a request and processed nothing for {span:.0f} s; {load}"
            if busy and sum(busy) / len(busy) >= 1 - FREE_SHARE:
                return Diagnosis("slow", f"{what}: the machine is too busy for this preset")
            return Diagnosis("stuck", f"{what}: the server is stuck, the box is not the cause")
        return Diagnosis("idle", f"the server was idle for {span:.0f} s: opencode sent it nothing")

    def _ref(self, figure: str) -> tuple[float | None, float | None]:
        return (getattr(self.probe, figure, None) if self.probe else None,
                getattr(self.reference, figure, None) if self.reference else None)

    @staticmethod
    def _judge(cause: str, rate: float, ref: tuple[float | None, float | None], what: str, load: str) -> Diagnosis:
        best = max((v for v in ref if v), default=None)
        if best and rate < SLOW_SHARE * best:
            return Diagnosis("slow", f"{what}; {load}: the machine is too busy or too slow for this preset")
        return Diagnosis(cause, f"{what}; {load}")


def _decode_rate(before: Reading, now: Reading, slots: float | None) -> float | None:
    """Tokens decoded per second between two readings: llama.cpp's decode calls (times the slots
    each served) where the server counts them, else the generated-token counter."""
    span = max(now.t - before.t, 1e-3)
    steps = _grew(before.decode_steps, now.decode_steps)
    if steps is not None:
        return round(steps * max(slots or 1.0, 1.0) / span, 3)
    grown = _grew(before.generated_total, now.generated_total)
    return None if grown is None else round(grown / span, 3)


def _clock(wall: float, full: bool = False) -> str:
    """UTC, as the run's other times are: HH:MM:SS in a sentence, ISO on the timeline."""
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(wall, UTC)
    return moment.isoformat(timespec="seconds") if full else moment.strftime("%H:%M:%S UTC")


def _grew(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None and b >= a else None


def _say(ref: tuple[float | None, float | None]) -> str:
    probe, idle = ref
    parts = []
    if probe:
        parts.append(f"the probe measured {probe:g}")
    if idle and idle != probe:
        parts.append(f"best here {idle:g}")
    return "; " + ", ".join(parts) if parts else ""


# -- the best pace seen on this machine, per preset: "idle here" in a stall's sentence ---------

def _reference_file() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llms-benchmark" / "pace.json"


def reference(key: str) -> Probe | None:
    try:
        data = json.loads(_reference_file().read_text()).get(key)
        return Probe(**data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def remember(key: str, probe: Probe) -> Probe:
    """Keep the best figures of `key` (preset and CPU) seen on this machine; returns them."""
    path = _reference_file()
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    old = data.get(key) if isinstance(data.get(key), dict) else {}
    best = {f: max(v for v in (old.get(f), getattr(probe, f)) if v) if (old.get(f) or getattr(probe, f)) else None
            for f in ("decode_short_tps", "decode_long_tps", "prefill_tps")}
    data[key] = best
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError:
        pass
    return Probe(**best)
