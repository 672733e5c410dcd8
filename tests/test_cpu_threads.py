"""llama.cpp's threads chosen for the box it runs on (issue 47): the cores others leave free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.stacks import cpu_threads
from harness.stacks.cpu_threads import choose


@pytest.mark.parametrize(("usable", "busy", "threads"), [
    (2, 0.05, 2),   # an idle 2-core box: all of them, as before
    (2, 0.2, 2),    # background noise does not take a core away
    (2, 1.0, 1),    # one CPU-bound process beside: the collapse case
    (2, 2.0, 1),    # never fewer than one
    (2, 5.0, 1),
    (4, 1.1, 3),    # 2.9 free: a third core 90 % free counts
    (4, 1.3, 2),    # 2.7 free: a core 70 % free does not (a thread there waits at every barrier)
    (4, 0.9, 3),
    (1.5, 0.0, 1),  # a quota of 1.5 cores: one whole thread
    (8, 0.0, 8),
])
def test_choice_gives_the_free_cores(usable, busy, threads):
    got = choose(usable, busy, "test")
    assert got.threads == threads, got
    assert got.busy_cores == round(busy, 2)
    assert "test" in got.why and f"{busy:.1f}" in got.why


def test_a_choice_below_the_cores_says_why():
    assert "no thread waits" in choose(2, 1.0, "2 CPUs").why
    assert "all 2" in choose(2, 0.0, "2 CPUs").why


def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpu_threads.cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_threads.cgroup_quota(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_threads.cgroup_quota(tmp_path) == 0.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_threads.cgroup_quota(tmp_path) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cpu_threads.cgroup_quota(tmp_path / "absent") is None


def test_a_quota_below_the_affinity_caps_the_usable_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    usable, source = cpu_threads.usable_cores(tmp_path)
    assert usable == 0.5 and "quota" in source


def test_a_busy_process_is_seen_and_our_own_is_not():
    """A real CPU-bound process: counted as others' load, and not when it is ours (excluded).
    Both readings share one window (two threads), and the child's own CPU time over that window
    says how much it ran: on a busy box (a CI runner) it may get far less than a core."""
    from concurrent.futures import ThreadPoolExecutor

    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        ran0, t0 = cpu_threads._tree_cpu_s((child.pid,)), time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            counted_f = pool.submit(cpu_threads.busy_cores, 1.0)
            excluded_f = pool.submit(cpu_threads.busy_cores, 1.0, (child.pid,))
            counted, excluded = counted_f.result(), excluded_f.result()
        ran = (cpu_threads._tree_cpu_s((child.pid,)) - ran0) / (time.monotonic() - t0)
    finally:
        child.kill()
        child.wait()
    assert ran >= 0.2, f"the spinning child ran {ran:.2f} of a core: the box gave it no time to measure"
    assert counted >= 0.8 * ran, (counted, ran)
    assert counted - excluded >= 0.7 * ran - 0.05, (counted, excluded, ran)


@pytest.mark.skipif(not cpu_threads.demand_readable(), reason="the run queue is not this process's to read here")
def test_a_process_our_spinning_threads_starve_still_counts_whole():
    """Issue 62: with as many spinning threads of ours as cores, a CPU-bound process started
    beside them *consumes* about cores/(cores+1) of a core but *wants* a whole one: the reading
    is demand, so the threads are chosen down. Ours are excluded (named) and never counted."""
    cores = len(os.sched_getaffinity(0))
    spin = f"{sys.executable} -c 'while True: pass'"
    ours = subprocess.Popen(["sh", "-c", " & ".join([spin] * cores) + " & wait"], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert cpu_threads.runnable_threads(cpu_threads._tree_pids((ours.pid,))) >= 1
        wanted = cpu_threads.busy_cores(2.0, exclude=(ours.pid,))
    finally:
        os.killpg(ours.pid, signal.SIGKILL)
        other.kill()
        for proc in (ours, other):
            proc.wait()
    assert wanted >= 0.85, f"a busy loop beside {cores} threads of ours read as {wanted:.2f} cores wanted"


def test_runnable_threads_reads_the_state_after_the_last_parenthesis(tmp_path):
    """A command name may hold spaces and ')' (the agent names its processes): the state is read
    after the last one."""
    task = tmp_path / "42" / "task"
    for tid, comm, state in (("42", "llama-server", "R"), ("43", "a) S (b", "R"), ("44", "x", "S")):
        (task / tid).mkdir(parents=True)
        (task / tid / "stat").write_text(f"{tid} ({comm}) {state} 1 2 3\n")
    assert cpu_threads.runnable_threads([42], proc=tmp_path) == 2
    assert cpu_threads.runnable_threads([7], proc=tmp_path) == 0  # gone: nothing, never an error


def test_a_server_named_beside_the_launcher_that_started_it_is_counted_once():
    """Issue 62's cause of "others kept 0.2 busy" beside a busy process: the pace monitor names
    the launcher and its own server, the server is also the launcher's child, and its CPU time
    was subtracted twice (and its runnable threads counted twice)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        once = cpu_threads._tree_cpu_s((os.getpid(),))
        named_twice = cpu_threads._tree_cpu_s((os.getpid(), child.pid))
        child_cpu = cpu_threads._tree_cpu_s((child.pid,))
        assert sorted(cpu_threads._tree_pids((os.getpid(), child.pid))) == sorted({os.getpid(), child.pid})
    finally:
        child.kill()
        child.wait()
    assert child_cpu > 0.2
    assert abs(named_twice - once) < 0.5 * child_cpu, (once, named_twice, child_cpu)
