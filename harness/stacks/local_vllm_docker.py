"""`local-vllm-docker`: vLLM's OpenAI image in a local Docker container on an NVIDIA box,
as vllm-on-tap runs it:

    docker run -d --name vot-<preset> --label llms-benchmark.unit=<marker> --gpus all --ipc=host
        -p 127.0.0.1:<port>:8000 -v <HF cache>:/root/.cache/huggingface [-e NAME ...]
        <image> <model> --served-model-name <served name> <vllm args>

- The preset's `env` names are passed by name (`-e NAME`, no value): docker reads each
  value from its own environment, so a secret never appears in argv, logs or the ledger.
- The HF cache is `$HF_HOME`, else `~/.cache/huggingface` (created if missing, so docker
  does not create it as root).
- The image is the environment's `config.image` (vllm-on-tap's field), default
  `vllm/vllm-openai:v0.30.0`.
- Logs come from `docker logs --timestamps [--since T]`: the offset handed back by `logs`
  is the nanosecond timestamp of the last line returned, so each call returns only new
  text, stdout and stderr merged in time order. They are mirrored to `.vot/run/vot-<preset>.log`.
- Ownership: the unit is in the ledger (container name and marker) before `docker run`,
  and the container carries the label `llms-benchmark.unit=<marker>`. Destroy removes the
  recorded container id, or — when a launch died before `docker run` returned — only the
  container carrying this unit's label. A container we did not create is never removed:
  preflight refuses when one already holds the unit's name.
"""

from __future__ import annotations

import calendar
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from harness.errors import PreflightError, StackError
from harness.stacks.vllm_log import kv_facts
from harness.stacks.base import GpuCell, Unit
from harness.stack_specs.catalog import DOCKER_DEFAULT_IMAGE as DEFAULT_IMAGE
from harness.stacks.ledger import Ledger
from harness.stacks.local_process import LocalProcessStack
from harness.stacks.local_vllm import nvidia_gpu_cell
from harness.vot import render
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset

CONTAINER_PORT = 8000
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
LABEL = "llms-benchmark.unit"

_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ?")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")


def hf_cache_dir() -> Path:
    """The host's Hugging Face home, mounted as the container's."""
    home = os.environ.get("HF_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface"


def parse_timestamp(line: str) -> tuple[int, str] | None:
    """`2026-05-01T12:00:00.123456789Z text` → (ns since the epoch, text); None without a stamp."""
    m = _TS.match(line)
    if not m:
        return None
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    zone = m.group(3)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    nanos = int((m.group(2) or "0").ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos, line[m.end():]


def format_timestamp(ns: int) -> str:
    """ns since the epoch → RFC 3339 with nanoseconds in UTC (what `docker logs --since` takes)."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def _no_such(stderr: str) -> bool:
    return "no such" in stderr.lower()  # "No such container" / "No such object"


class LocalVllmDockerStack(LocalProcessStack):
    name = "local-vllm-docker"
    ready_timeout_s = 15 * 60
    run_timeout_s = 30 * 60  # `docker run` pulls the image first when it is missing (~9 GB)
    cli_timeout_s = 60.0  # any other docker command
    gone_timeout_s = 30.0  # destroy: how long `docker inspect` may still see the container

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._mirrored: dict[str, int] = {}  # unit name → newest log timestamp mirrored to its file

    # -- the docker CLI --------------------------------------------------------------------
    def _docker(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["docker", *args], capture_output=True, text=True, errors="replace",
                                  stdin=subprocess.DEVNULL, timeout=timeout or self.cli_timeout_s)
        except FileNotFoundError as exc:
            raise StackError("docker is not on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise StackError(f"`docker {' '.join(args[:2])}` did not answer within "
                             f"{timeout or self.cli_timeout_s:.0f}s") from exc

    @staticmethod
    def image(env: Environment) -> str:
        return str(env.config.get("image") or DEFAULT_IMAGE)

    # -- preflight ---------------------------------------------------------------------------
    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        if shutil.which("docker") is None:
            raise PreflightError(
                "docker is not installed on this machine (not on PATH)",
                file=env.path, field="stack",
                fix="install Docker Engine and the NVIDIA Container Toolkit, or use the `local-gpu` "
                    "(local-vllm) or `cpu` environment",
            )
        try:
            info = self._docker("info", "--format", "{{.ServerVersion}}")
        except StackError as exc:
            info = subprocess.CompletedProcess([], 1, "", str(exc))
        if info.returncode != 0:
            said = " ".join((info.stderr or info.stdout).split())[:300]
            raise PreflightError(
                f"`docker info` failed (exit {info.returncode}): the Docker daemon does not answer: {said}",
                file=env.path, field="stack",
                fix="start the Docker daemon (`sudo systemctl start docker`) and let this user reach it "
                    "(`sudo usermod -aG docker $USER`, then log in again); `docker info` must succeed",
            )
        cell = nvidia_gpu_cell(env)
        self.check_port(env)
        self._refuse_foreign_container(env, preset)
        return cell

    def _refuse_foreign_container(self, env: Environment, preset: ResolvedPreset) -> None:
        name = f"vot-{preset.name}"
        found = self._docker("ps", "-a", "--no-trunc", "--filter", f"name=^{name}$", "--format", "{{.ID}}")
        if found.returncode != 0:
            raise PreflightError(f"`docker ps` failed: {' '.join(found.stderr.split())[:300]}",
                                 file=env.path, field="stack", fix="check that `docker ps -a` works")
        if not found.stdout.strip():
            return
        ours = [u for u in Ledger(self.root).all()
                if u.stack == self.name and u.extra.get("container", u.name) == name]
        if any(u.environment == env.name for u in ours):
            return  # ours, on this environment: the launch refuses a second unit, naming the destroy
        if ours:
            raise PreflightError(
                f"container {name} is already served by environment '{ours[0].environment}' "
                "(container names are global on one Docker daemon)",
                file=env.path, field="stack",
                fix=f"destroy it first: llms-benchmark destroy {ours[0].environment} {preset.name}",
            )
        raise PreflightError(
            f"a container named {name} exists that llms-benchmark did not create (it is not in the ledger "
            f"{Ledger(self.root).path}); it is never removed by this tool",
            file=env.path, field="stack",
            fix=f"inspect it (`docker ps -a --filter name=^{name}$`) and remove it yourself "
                f"(`docker rm -f {name}`) if it may go",
        )

    # -- serve ---------------------------------------------------------------------------------
    def plan(self, env: Environment, preset: ResolvedPreset) -> Unit:
        unit = super().plan(env, preset)
        unit.extra.update(container=unit.name, image=self.image(env))
        return unit

    def command(self, env: Environment, preset: ResolvedPreset, port: int, *, name: str = "",
                marker: str = "") -> list[str]:
        name = name or f"vot-{preset.name}"
        passed = [arg for var in preset.env for arg in ("-e", var)]  # by name: docker reads the value
        return ["docker", "run", "-d", "--name", name, "--label", f"{LABEL}={marker}",
                "--gpus", "all", "--ipc=host", "-p", f"{self.host}:{port}:{CONTAINER_PORT}",
                "-v", f"{hf_cache_dir()}:{CONTAINER_HF_CACHE}", *passed,
                self.image(env), preset.model, "--served-model-name", preset.served_name,
                *render.argv(preset.vllm_args)]

    def serve(self, unit: Unit, env: Environment, preset: ResolvedPreset) -> Unit:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if unit.log_path:
            Path(unit.log_path).write_text("")
        hf_cache_dir().mkdir(parents=True, exist_ok=True)
        argv = self.command(env, preset, unit.extra["port"], name=unit.extra["container"],
                            marker=unit.extra["marker"])
        done = self._docker(*argv[1:], timeout=self.run_timeout_s)
        if done.returncode != 0:
            said = done.stderr.strip()[-600:]
            hint = ""
            if "device driver" in said or "nvidia" in said.lower():
                hint = " — is the NVIDIA Container Toolkit installed (`docker run --rm --gpus all ubuntu nvidia-smi`)?"
            raise StackError(f"docker run failed (exit {done.returncode}): {said}{hint}")
        lines = done.stdout.strip().splitlines()
        cid = lines[-1].strip() if lines else ""
        if not _CONTAINER_ID.match(cid):
            raise StackError(f"docker run printed no container id: {done.stdout.strip()[-200:]!r}")
        unit.extra["container_id"] = cid
        # The image's id (sha256 of its config): the tag alone can move under a re-pull.
        seen = self._docker("inspect", "-f", "{{.Image}}", cid)
        if seen.returncode == 0 and seen.stdout.strip().startswith("sha256:"):
            unit.extra["image_digest"] = seen.stdout.strip()
        return unit

    # -- logs / alive ----------------------------------------------------------------------------
    def logs(self, unit: Unit, offset: int) -> tuple[str, int]:
        cid = unit.extra.get("container_id")
        if not cid:
            return "", offset
        args = ["logs", "--timestamps"]
        if offset:
            args += ["--since", format_timestamp(offset)]
        try:
            done = self._docker(*args, cid)
        except StackError:
            return "", offset  # a slow daemon: try again at the next poll
        if done.returncode != 0:
            return "", offset  # gone (destroyed, or never started)
        stamped = []
        for stream in (done.stdout, done.stderr):  # the container's stdout and stderr
            for line in stream.splitlines(keepends=True):
                parsed = parse_timestamp(line)
                if parsed and parsed[0] > offset:  # --since is inclusive: drop what was returned
                    stamped.append(parsed)
        if not stamped:
            return "", offset
        stamped.sort(key=lambda item: item[0])  # stable: equal stamps keep stdout first
        newest = stamped[-1][0]
        self._mirror(unit, stamped)
        return "".join(text for _, text in stamped), newest

    def _mirror(self, unit: Unit, stamped: list[tuple[int, str]]) -> None:
        if not unit.log_path:
            return
        seen = self._mirrored.get(unit.name, 0)
        fresh = "".join(text for ts, text in stamped if ts > seen)
        if fresh:
            with open(unit.log_path, "a", encoding="utf-8") as fh:
                fh.write(fresh)
            self._mirrored[unit.name] = stamped[-1][0]

    def alive(self, unit: Unit) -> bool:
        cid = unit.extra.get("container_id")
        if not cid:
            return False
        try:
            done = self._docker("inspect", "-f", "{{.State.Running}}", cid)
        except StackError:
            return True  # unknown (daemon slow): not evidence of death
        if done.returncode != 0:
            return not _no_such(done.stderr)
        return done.stdout.strip() == "true"

    # -- destroy ----------------------------------------------------------------------------------
    def _labelled(self, marker: str) -> list[str]:
        found = self._docker("ps", "-a", "-q", "--no-trunc", "--filter", f"label={LABEL}={marker}")
        if found.returncode != 0:
            raise StackError(f"docker ps failed: {found.stderr.strip()[-300:]}")
        return [line.strip() for line in found.stdout.splitlines() if line.strip()]

    def destroy(self, unit: Unit) -> bool:
        """`docker rm -f` the unit's container, then wait until `docker inspect` no longer finds it."""
        cid = unit.extra.get("container_id")
        marker = unit.extra.get("marker", "")
        # Without a recorded id (a launch died inside `docker run`), only a container that
        # carries this unit's label is ours — never one found by name alone.
        targets = [cid] if cid else (self._labelled(marker) if marker else [])
        existed = False
        for target in targets:
            done = self._docker("rm", "-f", target, timeout=120)
            if done.returncode != 0 and not _no_such(done.stderr):
                raise StackError(f"docker rm -f {target} failed: {done.stderr.strip()[-300:]}")
            existed = existed or (done.returncode == 0 and not _no_such(done.stderr))
            self._wait_gone(target)
        self._mirrored.pop(unit.name, None)
        return existed

    def _wait_gone(self, target: str) -> None:
        deadline = time.monotonic() + self.gone_timeout_s
        for _ in range(int(self.gone_timeout_s / 0.5) + 1):
            seen = self._docker("inspect", "-f", "{{.State.Status}}", target)
            if seen.returncode != 0:
                if _no_such(seen.stderr):
                    return
                raise StackError(f"cannot verify that container {target} is gone: {seen.stderr.strip()[-300:]}")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        raise StackError(f"container {target} still exists after `docker rm -f` ({self.gone_timeout_s:.0f}s)")

    def fatal_patterns(self) -> tuple[str, ...]:
        return ("EngineCore failed to start", "Engine core initialization failed")

    def describe(self, unit: Unit, env: Environment, preset: ResolvedPreset,
                 log_text: str) -> dict[str, str | list[str]]:
        return kv_facts(log_text)
