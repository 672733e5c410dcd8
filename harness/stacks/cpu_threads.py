"""How many threads llama.cpp's CPU server runs on this box, chosen from what is free now.

llama.cpp's CPU backend meets all its threads at a barrier after every graph op and, by
default, spins while it waits (`--poll 50`). With as many threads as cores, one other
CPU-bound process takes a core from one thread and every op then waits for the scheduler:
measured on 2 cores beside one busy process (issue 47), 0.8-2.6 tok/s with `--threads 2`
against 7.2-11.4 with `--threads 1`. So the server gets the cores that nobody else is using,
never fewer than one, and the choice and its reason go on the run record.

Cores usable by this process: its CPU affinity, capped by a cgroup CPU quota (v2 `cpu.max`,
v1 `cpu.cfs_quota_us`) where one is set. Cores busy with others: the usable CPUs' busy time
over a short window (/proc/stat, or the cgroup's own usage under a quota), less what the
processes we name (our own server, the launcher) used in the same window.
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


def _tree_cpu_s(pids: tuple[int, ...]) -> float:
    """CPU seconds used so far by the named processes and their descendants."""
    seconds = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                try:
                    t = proc.cpu_times()
                    seconds += t.user + t.system
                except psutil.Error:
                    continue
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


def busy_cores(window_s: float = SAMPLE_S, exclude: tuple[int, ...] = (), cgroup: Path = CGROUP) -> float:
    """Cores that processes other than `exclude` (and their children) kept busy over the window:
    under a CPU quota the cgroup's own usage (the host's other tenants do not share our quota),
    else the busy time of the CPUs in our affinity."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    quota = cgroup_quota(cgroup) is not None and cgroup_usage_s(cgroup) is not None

    def used() -> float:
        if quota:
            return cgroup_usage_s(cgroup) or 0.0
        return _cpu_busy_ticks(cpus) / os.sysconf("SC_CLK_TCK")

    ours0, used0, t0 = _tree_cpu_s(exclude), used(), time.monotonic()
    time.sleep(window_s)
    ours1, used1, t1 = _tree_cpu_s(exclude), used(), time.monotonic()
    elapsed = max(t1 - t0, 1e-3)
    return max(0.0, (used1 - used0 - (ours1 - ours0)) / elapsed)


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
