"""Fixtures for the end-to-end tests: a throw-away project root per test, the real
console script run against it, and a check that nothing a test started survives it.

Every launch a test makes runs in its own project root under `tmp_path` (found by the
harness through LLMS_BENCHMARK_ROOT), so no test writes into the checkout's
`.llms-benchmark/` or `.vot/run/`, and survivors are recognised by that root only:
a process belongs to a test when its cwd or its LLMS_BENCHMARK_ROOT / XDG_DATA_HOME
lies under the test's tmp_path — never by its name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from harness.stacks.local_process import MARKER_VAR

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "llms-benchmark"
OPENCODE = REPO / "node_modules" / ".bin" / "opencode"
TEST_TRAJECTORIES = Path(__file__).resolve().parent / "trajectories"
# The environment variables that tie a process to a project root or an opencode store.
_ROOT_VARS = ("LLMS_BENCHMARK_ROOT", "XDG_DATA_HOME")


# -- xdist: test files that run on one worker ------------------------------------------------
# Under `--dist loadgroup` (`make test`), every test of these files goes to one worker and runs
# there in order; every other test is distributed as with `load`. tests/test_vllm_real.py serves
# the real vLLM (~4.6 GB and both cores a server): one at a time. xdist 3.8's own `xdist_group`
# marker does nothing under pytest 9.2 (it renames items through `_nodeid`, which pytest 9 no
# longer reads: measured, two marked tests ran on two workers), so the group is named here.
ONE_WORKER = ("tests/test_vllm_real.py",
              # Its user-launched tests open /root's search bit for their launch, one at a time.
              "tests/test_postrun_e2e.py")


class _FileGroups:
    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadGroupScheduling

        class FileGroups(LoadGroupScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                return path if path in ONE_WORKER else super()._split_scope(nodeid)

        return FileGroups(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_FileGroups(), "llms-benchmark-file-groups")


# -- processes ---------------------------------------------------------------------------
def _under(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == root or root in resolved.parents


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes tied to `root`: started with it as project root (the launch, the
    unit, which also carries the unit marker), or an opencode whose store or cwd is in
    it. Processes of other users or of other checkouts never match."""
    root = root.resolve()
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            tied = any(_under(env.get(var), root) for var in _ROOT_VARS)
            if not tied and (MARKER_VAR in env or "opencode" in " ".join(proc.cmdline())):
                # A unit or an opencode started elsewhere is none of ours unless it runs here.
                tied = _under(proc.cwd(), root)
            if tied:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def marker_processes_under(root: Path) -> list[psutil.Process]:
    """The subset carrying the unit marker (a served unit or something it spawned)."""
    out = []
    for proc in processes_under(root):
        try:
            if MARKER_VAR in proc.environ():
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def describe(procs: list[psutil.Process]) -> str:
    rows = []
    for proc in procs:
        try:
            rows.append(f"pid {proc.pid}: {' '.join(proc.cmdline())[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            rows.append(f"pid {proc.pid}: (gone)")
    return "; ".join(rows)


def wait_gone(root: Path, timeout_s: float = 15.0) -> list[psutil.Process]:
    """Survivors tied to `root` after up to `timeout_s` (exits take a moment on a busy box)."""
    deadline = time.monotonic() + timeout_s
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.3)
    return left


def kill_by_pid(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    psutil.wait_procs(procs, timeout=10)


# -- the project root --------------------------------------------------------------------
@dataclass
class Project:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    # files ----------------------------------------------------------------------------
    def add_trajectory(self, name: str, source: Path | str | dict | None = None) -> str:
        """replay/<name>.yaml from tests/trajectories/<name>.yaml, a path, YAML text or a
        mapping; returns the path relative to the root (what a preset's `model` takes)."""
        dest = self.root / "replay" / f"{name}.yaml"
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source is None:
            source = TEST_TRAJECTORIES / f"{name}.yaml"
        if isinstance(source, Path):
            shutil.copy2(source, dest)
        elif isinstance(source, dict):
            dest.write_text(yaml.safe_dump(source, sort_keys=False))
        else:
            dest.write_text(source)
        return f"replay/{name}.yaml"

    def add_preset(self, name: str, text: str | None = None, *, trajectory: str | None = None,
                   **changes: Any) -> Path:
        """.vot/presets/<name>.yaml: raw text, or replay-hello's preset renamed, playing
        `trajectory` (a name under replay/) and with top-level keys changed (None drops one)."""
        path = self.root / ".vot" / "presets" / f"{name}.yaml"
        if text is None:
            data = yaml.safe_load((REPO / ".vot" / "presets" / "replay-hello.yaml").read_text())
            data.update(name=name, served_model_name=name)
            if trajectory:
                data["model"] = f"replay/{trajectory}.yaml"
                data["description"] = f"test preset playing replay/{trajectory}.yaml"
            for key, value in changes.items():
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            text = yaml.safe_dump(data, sort_keys=False)
        path.write_text(text)
        return path

    def add_environment(self, name: str, text: str | None = None) -> Path:
        """.vot/environments/<name>.yaml: raw text, or the checkout's file of that name."""
        path = self.root / ".vot" / "environments" / f"{name}.yaml"
        if text is None:
            shutil.copy2(REPO / ".vot" / "environments" / f"{name}.yaml", path)
        else:
            path.write_text(text)
        return path

    def add_mission(self, name: str, base: str = "hello", **manifest: Any) -> Path:
        """missions/<name>/: a copy of missions/<base> with manifest keys changed."""
        folder = self.root / "missions" / name
        shutil.copytree(REPO / "missions" / base, folder)
        path = folder / "mission.yaml"
        data = yaml.safe_load(path.read_text())
        data.update(name=name, **manifest)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return folder

    # what a launch left ---------------------------------------------------------------
    @property
    def runs_dir(self) -> Path:
        return self.root / ".llms-benchmark" / "runs"

    def run_dirs(self) -> list[Path]:
        if not self.runs_dir.is_dir():
            return []
        return sorted(p for p in self.runs_dir.iterdir() if (p / "run.json").is_file())

    def records(self) -> list[dict]:
        return [json.loads((d / "run.json").read_text()) for d in self.run_dirs()]

    def only_run(self) -> tuple[Path, dict]:
        dirs = self.run_dirs()
        assert len(dirs) == 1, f"expected one run folder, found {[d.name for d in dirs]}"
        return dirs[0], json.loads((dirs[0] / "run.json").read_text())

    @property
    def ledger_path(self) -> Path:
        return self.root / ".vot" / "run" / "units.json"

    def ledger(self) -> dict:
        try:
            return json.loads(self.ledger_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    @staticmethod
    def served(run_dir: Path, trajectory: str | None = None) -> list[dict]:
        path = run_dir / "served.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [x for x in lines if trajectory is None or x.get("trajectory") == trajectory]

    def survivors(self, timeout_s: float = 15.0) -> list[psutil.Process]:
        return wait_gone(self.root, timeout_s)

    # running the CLI --------------------------------------------------------------------
    def popen(self, args: list[str]) -> subprocess.Popen:
        return subprocess.Popen([str(CLI), *args], cwd=self.root, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run_cli(self, args: list[str], timeout: float) -> tuple[int, str, str]:
        """The real console script; a launch past `timeout` is interrupted (so it destroys
        what it served), then killed, and the test fails with what it printed."""
        proc = self.popen(args)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = stop(proc)
            pytest.fail(f"`llms-benchmark {' '.join(args)}` ran past {timeout:.0f}s\n"
                        f"--- stdout\n{out}\n--- stderr\n{err}")
        return proc.returncode, out, err


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGINT (the launch destroys its unit), then SIGKILL if it will not end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate(timeout=10)


def cli_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != MARKER_VAR}
    env.update(
        LLMS_BENCHMARK_ROOT=str(root),
        LLMS_BENCHMARK_OPENCODE=str(OPENCODE),
        COLUMNS="400",  # rich wraps at 80 columns on a pipe; one message stays one line
        PYTHONUNBUFFERED="1",
    )
    return env


def quick_trajectory(dest: Path, *, stall_mission_s: float | None = None) -> Path:
    """replay/hello.yaml without its scripted think time and with a fast fallback (the probe's
    answers): a test launch that is not about speed does not sleep through 4.5 s of mission,
    0.6 s of smoke and 1 s of probe. With `stall_mission_s`, the mission's first request stalls
    that long, so an orphaned opencode is surely still running when the next command looks for it.
    Tests about timing play their own trajectory (tests/trajectories/hello-timed.yaml)."""
    data = yaml.safe_load((REPO / "replay" / "hello.yaml").read_text())
    data["fallback"]["decode_tps"] = 20000  # the probe's 128 + 64 tokens: 10 ms, not 1 s
    for trajectory in data["trajectories"]:
        for step in trajectory["steps"]:
            if "ttft" in step:
                step["ttft"], step["duration"] = 0.0, 0.0
        if stall_mission_s and trajectory["name"] == "hello":
            trajectory["steps"].insert(0, {"stall": stall_mission_s})
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def make_project(root: Path) -> Project:
    """The replay environment, the replay-hello preset, its trajectory (quick: see
    quick_trajectory) and the hello mission at `root`."""
    for folder in (".vot/environments", ".vot/presets", "missions", "replay"):
        (root / folder).mkdir(parents=True)
    shutil.copy2(REPO / ".vot" / "environments" / "replay.yaml", root / ".vot" / "environments")
    shutil.copy2(REPO / ".vot" / "presets" / "replay-hello.yaml", root / ".vot" / "presets")
    shutil.copytree(REPO / "missions" / "hello", root / "missions" / "hello")
    quick_trajectory(root / "replay" / "hello.yaml")
    return Project(root=root, env=cli_env(root))


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """A project root with the replay environment, the replay-hello preset, its
    trajectory and the hello mission; anything tied to it is gone when the test ends."""
    proj = make_project((tmp_path / "project").resolve())
    yield proj
    left = wait_gone(tmp_path.resolve())
    if left:
        listing = describe(left)
        kill_by_pid(left)
        pytest.fail(f"processes outlived the test: {listing}")


@pytest.fixture
def run_cli(project: Project):
    """run_cli(args, timeout) -> (exit code, stdout, stderr) against the test's project."""
    return project.run_cli


# llama.cpp's worker threads spin at a barrier between ops: on 2 cores shared with the other xdist
# worker (an opencode, a replay server), 2 threads collapse (measured: llama-server took 14.5 % of the
# CPU samples over 70 % of a suite run, and the fitness test's two requests at 2048 tokens took 34 s). One
# thread on a shared box does the same work without the spin; speeds are measured in bench/, not here.
TEST_LLAMA_THREADS = 1


def cpu_environment_text() -> str:
    """The checkout's `cpu` environment with llama.cpp on TEST_LLAMA_THREADS threads."""
    data = yaml.safe_load((REPO / ".vot" / "environments" / "cpu.yaml").read_text())
    data.setdefault("config", {})["threads"] = TEST_LLAMA_THREADS
    return yaml.safe_dump(data, sort_keys=False)


def cpu_environment():
    """The checkout's `cpu` environment, loaded, with llama.cpp on TEST_LLAMA_THREADS threads."""
    from harness.vot.environment import load_environment

    env = load_environment(REPO, "cpu")
    return env.model_copy(update={"config": {**env.config, "threads": TEST_LLAMA_THREADS}})


def fitness_data_dir(suites: list[str] | None = None) -> Path:
    """The frozen capability files `make setup` extracted (`fitness data`): tests read them,
    they never download (tests talk to loopback only)."""
    from harness.errors import UserError
    from harness.fitness import data

    folder = data.default_dir()
    try:
        for suite in suites or list(data.SUITES):
            data.verify(folder, suite)
    except UserError as exc:
        pytest.fail(f"{exc} - run `make setup` (it runs `llms-benchmark fitness data`)")
    return folder


def fitness_checkers_venv() -> Path:
    """The checkers' lean venv (bfcl-eval, if-verifiable) that `make setup` made."""
    from harness.fitness import checkers

    venv = checkers.default_dir()
    if not checkers.ready(venv):
        pytest.fail(f"the checkers' venv {venv} is missing - run `make setup` (it runs `llms-benchmark fitness data`)")
    return venv

