"""How many threads llama.cpp's CPU server runs on this box, chosen from what is free now.

llama.cpp's CPU backend meets all its threads at a barrier after every graph op and, by
default, spins while it waits (`--poll 50`). With as many threads as cores, one other
CPU-bound process takes a core from one thread and every op then waits for the scheduler:
measured on 2 cores beside one busy process (issue 47), 0.8-2.6 tok/s with `--threads 2`
against 7.2-11.4 with `--threads 1`. So the server gets the cores that nobody else is using,
never fewer than one, and the choice and its reason go on the run record.

Cores usable by this process: its CPU affinity, capped by a cgroup CPU quota (v2 `cpu.max`,
v1 `cpu.cfs_quota_us`) where one is set. Cores others want: the larger of
- their *demand*: the tasks runnable on the box (`procs_running` in /proc/stat, sampled every
  50 ms over the window) less ours (the threads of the processes we name in state R): a
  process that waits for a core our spinning threads hold counts whole (issue 62: a busy
  loop started mid-mission *consumed* 0.2 of a core while it wanted 1.0, and the server
  kept 2 threads at 0.03 of its idle decode). Where the box's run queue is not ours alone to
  read (an affinity narrower than the machine, a cgroup quota) it is not used;
- their *consumption*: the usable CPUs' busy time over the window (/proc/stat, or the cgroup's
  own usage under a quota), less what the processes we name used in the same window.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

# A core counts as free when others use at most a quarter of it: a thread that shares a core
# half the time already makes the barrier wait (the collapse above).
FREE_SHARE = 0.75
SAMPLE_S = 1.0
DEMAND_EVERY_S = 0.05  # run-queue samples: 20 a second
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    usable_cores: float
    busy_cores: float  # used by other processes over the window
    source: str  # where the usable cores came from
    why: str

    def as_record(self) -> dict:
        return asdict(self)


def usable_cores(cgroup: Path = CGROUP) -> tuple[float, str]:
    """(cores, how we know): the affinity mask, capped by a CPU quota where one is set."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_quota(cgroup)
    if quota is not None and quota < affinity:
        return quota, f"cgroup CPU quota {quota:g} of {affinity} CPUs"
    return float(affinity), f"{affinity} CPUs in this process's affinity"


def cgroup_quota(cgroup: Path = CGROUP) -> float | None:
    """The CPU quota in cores (cgroup v2 cpu.max or v1 cfs), None where there is none."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def _cpu_busy_ticks(cpus: set[int]) -> float:
    """Busy jiffies (all but idle and iowait; steal counts: the host took it) of the given CPUs
    since boot, from /proc/stat."""
    busy = 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        values = [float(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        busy += sum(values) - values[3] - values[4]
    return busy


def _tree_pids(pids: tuple[int, ...]) -> list[int]:
    """The processes named and their descendants, each once (a server named beside the launcher
    that started it is both)."""
    found: dict[int, None] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            found.update(dict.fromkeys([root.pid, *(c.pid for c in root.children(recursive=True))]))
        except psutil.Error:
            continue
    return list(found)


def _tree_cpu_s(pids: tuple[int, ...]) -> float:
    """CPU seconds used so far by the named processes and their descendants, each counted once
    (issue 62: the server, named beside the launcher that started it, was subtracted twice, and
    a busy process beside it read as 0.2 of a core)."""
    seconds = 0.0
    for pid in _tree_pids(pids):
        try:
            t = psutil.Process(pid).cpu_times()
            seconds += t.user + t.system
        except psutil.Error:
            continue
    return seconds


def cgroup_usage_s(cgroup: Path = CGROUP) -> float | None:
    """CPU seconds the cgroup used so far (v2 cpu.stat usage_usec, v1 cpuacct.usage)."""
    try:
        for line in (cgroup / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        pass
    try:
        return int((cgroup / "cpuacct" / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def procs_running(stat: Path = Path("/proc/stat")) -> int | None:
    """Tasks runnable on the whole machine now (running or waiting for a CPU)."""
    try:
        for line in stat.read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def runnable_threads(pids: list[int], proc: Path = Path("/proc")) -> int:
    """Threads of these processes in state R (running or runnable) now."""
    count = 0
    for pid in pids:
        try:
            tasks = os.listdir(proc / str(pid) / "task")
        except OSError:
            continue
        for tid in tasks:
            try:
                stat = (proc / str(pid) / "task" / tid / "stat").read_bytes()
            except OSError:
                continue
            # pid (comm) S ...: the command may hold spaces and parentheses; the state follows the last ')'
            state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
            count += state == b"R"
    return count


def demand_readable(cgroup: Path = CGROUP) -> bool:
    """procs_running counts the whole machine: ours to read only where this process may use
    every CPU and no quota shares them out."""
    if not hasattr(os, "sched_getaffinity") or cgroup_quota(cgroup) is not None:
        return False
    return len(os.sched_getaffinity(0)) >= (os.cpu_count() or 0) and procs_running() is not None


def busy_cores(window_s: float = SAMPLE_S, exclude: tuple[int, ...] = (), cgroup: Path = CGROUP) -> float:
    """Cores that processes other than `exclude` (and their children) want over the window: the
    larger of their run-queue demand (where readable) and their consumption (under a CPU quota
    the cgroup's own usage, the host's other tenants not sharing it; else the busy time of the
    CPUs in our affinity)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    quota = cgroup_quota(cgroup) is not None and cgroup_usage_s(cgroup) is not None

    def used() -> float:
        if quota:
            return cgroup_usage_s(cgroup) or 0.0
        return _cpu_busy_ticks(cpus) / os.sysconf("SC_CLK_TCK")

    demand = demand_readable(cgroup)
    ours = _tree_pids(exclude) if demand else []
    samples: list[int] = []
    ours0, used0, t0 = _tree_cpu_s(exclude), used(), time.monotonic()
    deadline = t0 + window_s
    while (now := time.monotonic()) < deadline:
        if demand:
            total = procs_running()
            if total is not None:
                # less ours, and less this sampling thread itself (runnable while it reads)
                samples.append(max(0, total - runnable_threads(ours) - (0 if os.getpid() in ours else 1)))
        time.sleep(min(DEMAND_EVERY_S, max(0.0, deadline - now)))
    ours1, used1, t1 = _tree_cpu_s(exclude), used(), time.monotonic()
    elapsed = max(t1 - t0, 1e-3)
    consumed = max(0.0, (used1 - used0 - (ours1 - ours0)) / elapsed)
    wanted = sum(samples) / len(samples) if samples else 0.0
    return max(consumed, wanted)


def choose(usable: float, busy: float, source: str) -> ThreadChoice:
    """One thread per core that others leave free, at least one, at most the usable cores."""
    ceiling = max(1, math.floor(usable))
    free = usable - busy
    threads = min(ceiling, max(1, math.floor(free + (1 - FREE_SHARE))))
    if threads == ceiling:
        why = f"{source}; others kept {busy:.1f} busy: all {threads}"
    else:
        why = (f"{source}; others kept {busy:.1f} busy: {threads} thread{'s' if threads > 1 else ''}, "
               f"so no thread waits on a core another process holds")
    return ThreadChoice(threads, round(usable, 2), round(busy, 2), source, why)


def choose_now(window_s: float = SAMPLE_S, exclude: tuple[int, ...] = ()) -> ThreadChoice:
    usable, source = usable_cores()
    return choose(usable, busy_cores(window_s, exclude=(os.getpid(), *exclude)), source)
