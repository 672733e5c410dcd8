"""A unit that is a local process: vLLM, llama.cpp's server, or the replay server.

The process starts in its own session (so its process group holds everything it
spawns) with a per-unit marker in its environment. Destroy finds the unit's
processes by that marker (walking the process table, never by name), so a PID
reused by an unrelated program is never signalled and a unit whose PID was never
recorded (a launch killed mid-serve) is still found.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import psutil

from harness.errors import PreflightError, StackError
from harness.records.paths import ProjectPaths
from harness.stacks.base import GpuCell, Unit, file_logs, unit_name
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset

MARKER_VAR = "LLMS_BENCHMARK_UNIT"
# Set on every opencode process a launch starts, valued with its unit's marker, so a
# SIGKILLed launch's agent is found and ended with its unit by the next command.
AGENT_MARKER_VAR = "LLMS_BENCHMARK_AGENT_OF"

# Children this process started: reaped on destroy so no zombie is left behind.
_children: dict[str, subprocess.Popen] = {}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False


def processes_with_marker(marker: str, var: str = MARKER_VAR) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(var) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


API_KEY_ENV = "VLLM_API_KEY"


class LocalProcessStack:
    """Shared serve/logs/alive/destroy for stacks whose unit is one local process tree."""

    name = "local-process"
    host = "127.0.0.1"
    ready_timeout_s = 15 * 60
    stop_grace_s = 60.0
    probe_long_cap: int | None = None  # tokens; None: the probe's 82k where the context allows
    gpu_cell = GpuCell("unknown", 0)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_dir = ProjectPaths(root).unit_run_dir

    # -- what each stack fills in -------------------------------------------------
    def command(self, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
        raise NotImplementedError

    def fatal_patterns(self) -> tuple[str, ...]:
        return ()

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        self.check_port(env)
        return self.gpu_cell

    # -- shared -------------------------------------------------------------------
    def check_port(self, env: Environment) -> None:
        if env.port and port_taken(env.port, self.host):
            raise PreflightError(
                f"port {env.port} on {self.host} is already in use",
                file=env.path,
                field="config.port",
                fix="stop what listens there, or set another config.port (0 picks a free one)",
            )

    def plan(self, env: Environment, preset: ResolvedPreset) -> Unit:
        port = env.port or free_port(self.host)
        name = unit_name(preset.name)
        return Unit(
            name=name,
            stack=self.name,
            environment=env.name,
            preset=preset.name,
            base_url=f"http://{self.host}:{port}",
            served_name=preset.served_name,
            max_model_len=preset.max_model_len,
            log_path=str(self.run_dir / f"{name}.log"),
            extra={"marker": uuid.uuid4().hex, "port": port},
            # vLLM's convention: a preset that passes VLLM_API_KEY (by name) serves behind
            # that key; clients read it from the same variable at the last moment.
            api_key_env=API_KEY_ENV if API_KEY_ENV in preset.env else None,
        )

    def serve(self, unit: Unit, env: Environment, preset: ResolvedPreset, *, append_log: bool = False) -> Unit:
        """Start the unit's process; `append_log` (a restart) keeps the log from the unit's creation."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        argv = self.command(env, preset, unit.extra["port"])
        child_env = {**os.environ, MARKER_VAR: unit.extra["marker"], **self.extra_env(env, preset)}
        with open(unit.log_path, "ab" if append_log else "wb") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=child_env,
                    cwd=self.root,
                )
            except OSError as exc:
                raise StackError(f"could not start {argv[0]}: {exc}") from exc
        _children[unit.extra["marker"]] = proc
        unit.pid = proc.pid
        (self.run_dir / f"{unit.name}.pid").write_text(f"{proc.pid}\n")
        return unit

    def extra_env(self, env: Environment, preset: ResolvedPreset) -> dict[str, str]:
        return {}

    def logs(self, unit: Unit, offset: int) -> tuple[str, int]:
        return file_logs(unit, offset)

    def alive(self, unit: Unit) -> bool:
        proc = _children.get(unit.extra.get("marker", ""))
        if proc is not None:
            return proc.poll() is None
        return bool(processes_with_marker(unit.extra.get("marker", "")))

    def exit_status(self, unit: Unit) -> int | None:
        """The unit's exit status once it has ended (negative: the signal that killed it);
        None while it runs or when this process did not start it."""
        proc = _children.get(unit.extra.get("marker", ""))
        return proc.poll() if proc is not None else None

    def destroy(self, unit: Unit) -> bool:
        marker = unit.extra.get("marker", "")
        procs = processes_with_marker(marker) if marker else []
        existed = bool(procs)
        groups = {p.pid for p in procs if _pgid(p.pid) == p.pid}
        for pgid in groups or {p.pid for p in procs}:
            _signal_group(pgid, signal.SIGTERM)
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        _, remaining = psutil.wait_procs(procs, timeout=self.stop_grace_s)
        for proc in remaining:
            _signal_group(proc.pid, signal.SIGKILL)
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(remaining, timeout=10)
        child = _children.pop(marker, None)
        if child is not None:
            child.wait(timeout=10)  # reap: no zombie outlives the unit
        # Verify: nothing carrying the marker may survive (grandchildren included).
        deadline = time.monotonic() + 10
        while (left := processes_with_marker(marker)) and time.monotonic() < deadline:
            for proc in left:
                _signal(proc, signal.SIGKILL)
            time.sleep(0.2)
        if processes_with_marker(marker):
            raise StackError(f"{unit.name}: processes survive SIGKILL: {[p.pid for p in left]}")
        (self.run_dir / f"{unit.name}.pid").unlink(missing_ok=True)
        return existed


def kill_marked(marker: str, var: str) -> list[int]:
    """SIGKILL every process carrying `var=marker` (an orphaned agent); returns their PIDs."""
    procs = processes_with_marker(marker, var) if marker else []
    for proc in procs:
        if _pgid(proc.pid) == proc.pid:
            _signal_group(proc.pid, signal.SIGKILL)  # the tools it started too
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(procs, timeout=10)
    return [p.pid for p in procs]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
