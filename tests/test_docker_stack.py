"""The local-vllm-docker stack driven through a stand-in `docker` (and `nvidia-smi`) on PATH.

The stand-in (tests/fakes/standins.py) records every argv and plays the real CLI's
answers; its "container" really runs the replay server on the mapped loopback port, so
`serve` waits on a real `/v1/models`. Asserted: the exact `docker run` line, secrets passed
by name only, logs by timestamp offset (new text only), destroy = `docker rm -f` verified by
`docker inspect`, the preflight refusals (daemon down, no GPU, a container we did not
create), leftovers found through the ledger, and a failed `docker run` cleaned up by label.
"""

from __future__ import annotations

import hashlib

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from conftest import Project

sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
import standins  # noqa: E402

from harness.stacks.local_vllm_docker import LocalVllmDockerStack, format_timestamp, parse_timestamp  # noqa: E402
from harness.vot.environment import load_environment  # noqa: E402
from harness.vot.preset import load_preset  # noqa: E402

ENV = "local-gpu-docker"
PRESET = "docker-hello"
UNIT = f"vot-{PRESET}"
SECRET_NAME = "VOT_TEST_HF_TOKEN"
SECRET_VALUE = "hf_s3cr3t-never-in-argv-8f2c"
GPU_LINE = "NVIDIA H100 80GB HBM3, 81559\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DockerBox:
    project: Project
    state: Path
    bin: Path
    port: int
    home: Path
    allowed_leftovers: tuple[str, ...] = ()

    def calls(self, tool: str | None = None) -> list[list[str]]:
        return standins.calls(self.state, tool)

    def docker_calls(self, sub: str) -> list[list[str]]:
        return [c[1:] for c in self.calls("docker") if c[1] == sub]

    def containers(self) -> list[standins.Container]:
        return standins.Docker(self.state).containers()

    def configure(self, **changes) -> None:
        standins.configure(self.state, **changes)

    def docker(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "docker"), *args], capture_output=True, text=True, timeout=60,
                              env=self.project.env)

    def cli(self, *args: str, timeout: float = 90) -> tuple[int, str, str]:
        return self.project.run_cli(list(args), timeout=timeout)


PRESET_DATA = {
    "name": PRESET,
    "description": "test preset served by the stand-in docker",
    "model": "Qwen/Qwen3-8B",
    "served_model_name": "qwen3-8b",
    "gpu_memory_gb": 24,
    "vllm_args": {
        "--max-model-len": 65536,
        "--gpu-memory-utilization": 0.92,
        "--enable-prefix-caching": True,
        "--enforce-eager": False,
        "--speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}',
        "--enable-auto-tool-choice": True,
        "--tool-call-parser": "hermes",
    },
    "env": [SECRET_NAME],
    "stacks": {"local-vllm-docker": {"vllm_args": {"--max-num-seqs": 8}}},
}


@pytest.fixture
def box(project: Project, tmp_path: Path) -> Iterator[DockerBox]:
    state, bin_dir, home = tmp_path / "docker-state", tmp_path / "bin", tmp_path / "home"
    home.mkdir()
    standins.install(bin_dir, state, tools={"nvidia-smi": {"*": [0, GPU_LINE]}})
    standins.configure(state, trajectory=str(project.root / "replay" / "hello.yaml"))
    port = free_port()
    project.add_environment(ENV, f"name: {ENV}\nstack: local-vllm-docker\nconfig:\n  port: {port}\n"
                                 "  image: vllm/vllm-openai:v0.30.0\n")
    project.add_preset(PRESET, yaml.safe_dump(PRESET_DATA, sort_keys=False))
    project.env.pop("HF_HOME", None)
    project.env.update(PATH=f"{bin_dir}:{project.env['PATH']}", HOME=str(home), **{SECRET_NAME: SECRET_VALUE})
    b = DockerBox(project, state, bin_dir, port, home)
    yield b
    # Whatever a test left running is killed here; only the containers it declared may be left.
    unexpected = []
    for c in b.containers():
        if c.name not in b.allowed_leftovers:
            unexpected.append(c.name)
        c.kill()
    assert not unexpected, f"containers outlived the test: {unexpected}"


def expected_run_argv(box: DockerBox, marker: str) -> list[str]:
    return ["run", "-d", "--name", UNIT, "--label", f"llms-benchmark.unit={marker}",
            "--gpus", "all", "--ipc=host", "-p", f"127.0.0.1:{box.port}:8000",
            "-v", f"{box.home}/.cache/huggingface:/root/.cache/huggingface", "-e", SECRET_NAME,
            "vllm/vllm-openai:v0.30.0", "Qwen/Qwen3-8B", "--served-model-name", "qwen3-8b",
            "--max-model-len", "65536", "--gpu-memory-utilization", "0.92", "--enable-prefix-caching",
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}',
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-num-seqs", "8"]


# -- preflight -------------------------------------------------------------------------------------
def test_preflight_asks_docker_and_nvidia_smi(box: DockerBox):
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["stack"] == "local-vllm-docker" and data["gpu"] == "H100 80GB HBM3 80 GB"
    assert box.calls() == [
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
        ["docker", "ps", "-a", "--no-trunc", "--filter", f"name=^{UNIT}$", "--format", "{{.ID}}"],
    ]


def test_daemon_down_is_refused_before_anything_runs(box: DockerBox):
    box.configure(info_fails=True)
    for command in (["preflight", ENV, PRESET, "--mission", "hello"], ["serve", ENV, PRESET]):
        code, out, err = box.cli(*command)
        flat = " ".join(err.split())
        assert code == 2, (command, out, err)
        assert f"{ENV}.yaml" in flat and "`docker info` failed" in flat and "Cannot connect to the Docker daemon" in flat
        assert "fix: start the Docker daemon" in flat and "Traceback" not in err
    # Nothing but `docker info`: no GPU query, no run, no ledger entry.
    assert box.calls() == [["docker", "info", "--format", "{{.ServerVersion}}"]] * 2
    assert box.project.ledger() == {} and box.containers() == []


def test_no_gpu_is_refused(box: DockerBox):
    standins.install(box.bin, box.state, tools={"nvidia-smi": {
        "*": [9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"]}})
    code, out, err = box.cli("serve", ENV, PRESET)
    flat = " ".join(err.split())
    assert code == 2 and "nvidia-smi failed" in flat and "fix: check the NVIDIA driver" in flat, err
    assert box.docker_calls("run") == [] and box.project.ledger() == {}


# -- serve / logs / destroy through the CLI ----------------------------------------------------------
def test_serve_then_destroy_end_to_end(box: DockerBox):
    code, out, err = box.cli("serve", ENV, PRESET, "--json")
    try:
        assert code == 0, err
        served = json.loads(out)
        assert served["base_url"] == f"http://127.0.0.1:{box.port}" and served["served_name"] == "qwen3-8b"
        ledger = box.project.ledger()
        unit = ledger[f"{ENV}/{UNIT}"]
        marker, cid = unit["extra"]["marker"], unit["extra"]["container_id"]
        assert unit["stack"] == "local-vllm-docker" and unit["extra"]["container"] == UNIT
        assert box.docker_calls("run") == [expected_run_argv(box, marker)]
        [container] = box.containers()
        assert container.id == cid and container.name == UNIT and container.running
        # The secret reached docker by name (it reads the value from its own environment) ...
        assert container.meta["env"] == {SECRET_NAME: True}
        # ... and its value is nowhere: not in any argv, the ledger or the unit log mirror.
        assert SECRET_VALUE not in (box.state / "calls.jsonl").read_text()
        assert SECRET_VALUE not in box.project.ledger_path.read_text()
        assert (box.home / ".cache" / "huggingface").is_dir()  # created by us, not by docker as root
        models = httpx.get(f"{served['base_url']}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["qwen3-8b"]
        # The log was read from creation on (the collector's last read, at the latest, when
        # `serve` stops it; a liveness poll may not come before the unit answers on a busy box).
        assert ["logs", "--timestamps", cid] in box.docker_calls("logs")
    finally:
        code, out, err = box.cli("destroy", ENV, PRESET)
    assert code == 0 and f"destroyed {UNIT} on {ENV}" in out, (out, err)
    assert box.docker_calls("rm") == [["rm", "-f", cid]]
    assert box.docker_calls("inspect")[-1] == ["inspect", "-f", "{{.State.Status}}", cid]
    assert box.containers() == [] and box.project.ledger() == {}
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{box.port}/v1/models", timeout=2)
    # A second destroy finds nothing in the ledger and runs nothing.
    before = len(box.calls())
    code, out, err = box.cli("destroy", ENV, PRESET)
    assert code == 0 and "does not exist" in out and len(box.calls()) == before


def test_fatal_engine_start_is_destroyed_at_once(box: DockerBox):
    box.configure(mode="fatal")
    started = time.monotonic()
    code, out, err = box.cli("serve", ENV, PRESET)
    assert code == 3, (out, err)
    assert time.monotonic() - started < 40  # the log said so: not the 15-minute readiness bound
    flat = " ".join(err.split())
    assert "EngineCore failed to start" in flat and "destroyed" in flat and "Traceback" not in err
    assert box.containers() == [] and box.project.ledger() == {}
    assert len(box.docker_calls("rm")) == 1


def test_failed_docker_run_removes_the_created_container_by_label(box: DockerBox):
    box.configure(no_gpu_runtime=True)  # created, then not started: exit 125, no id printed
    code, out, err = box.cli("serve", ENV, PRESET)
    flat = " ".join(err.split())
    assert code == 3, (out, err)
    assert "could not select device driver" in flat and "NVIDIA Container Toolkit" in flat
    marker = box.docker_calls("run")[0][5].split("=", 1)[1]
    ps, rm = box.docker_calls("ps"), box.docker_calls("rm")
    assert ps[-1] == ["ps", "-a", "-q", "--no-trunc", "--filter", f"label=llms-benchmark.unit={marker}"]
    assert len(rm) == 1 and rm[0][:2] == ["rm", "-f"] and len(rm[0][2]) == 64
    assert box.containers() == [] and box.project.ledger() == {}


# -- ownership: only what the ledger holds is ever removed ------------------------------------------------
def test_a_container_we_did_not_create_is_never_removed(box: DockerBox):
    foreign = box.docker("run", "-d", "--name", UNIT, "busybox", "sleep", "300")
    assert foreign.returncode == 0, foreign.stderr
    box.allowed_leftovers = (UNIT,)
    code, out, err = box.cli("serve", ENV, PRESET)
    flat = " ".join(err.split())
    assert code == 2 and "did not create" in flat and f"docker rm -f {UNIT}" in flat, (out, err)
    code, out, err = box.cli("destroy", ENV, PRESET)
    assert code == 0 and "does not exist" in out
    assert box.docker_calls("rm") == [] and [c.name for c in box.containers()] == [UNIT]
    assert box.containers()[0].running


def test_leftover_of_a_dead_launch_is_destroyed_through_the_ledger(box: DockerBox):
    other = box.docker("run", "-d", "--name", "someone-elses", "busybox", "sleep", "300")
    assert other.returncode == 0
    box.allowed_leftovers = ("someone-elses",)
    code, out, err = box.cli("serve", ENV, PRESET)
    assert code == 0, err
    first_id = box.project.ledger()[f"{ENV}/{UNIT}"]["extra"]["container_id"]
    # Make it look like the unit of a launch that was SIGKILLed: its owner is dead.
    dead = subprocess.Popen(["true"])
    dead.wait()
    units = json.loads(box.project.ledger_path.read_text())
    units[f"{ENV}/{UNIT}"]["extra"].update(owner_pid=dead.pid, owner_started=0.0)
    box.project.ledger_path.write_text(json.dumps(units))
    code, out, err = box.cli("serve", ENV, PRESET, "--json")
    try:
        assert code == 0, err
        assert f"leftover unit {UNIT}" in " ".join(err.split() + out.split())
        second_id = box.project.ledger()[f"{ENV}/{UNIT}"]["extra"]["container_id"]
        assert second_id != first_id
        assert box.docker_calls("rm") == [["rm", "-f", first_id]]
        assert sorted(c.name for c in box.containers()) == sorted(["someone-elses", UNIT])
    finally:
        code, out, err = box.cli("destroy", ENV, PRESET)
    assert code == 0
    assert [c.name for c in box.containers()] == ["someone-elses"]


# -- logs by offset, in process ------------------------------------------------------------------------
def test_logs_return_new_text_only(box: DockerBox, monkeypatch):
    for key, value in box.project.env.items():
        monkeypatch.setenv(key, value)
    root = box.project.root
    stack = LocalVllmDockerStack(root)
    env = load_environment(root, ENV)
    preset = load_preset(root, PRESET).resolve(env.stack)
    unit = stack.plan(env, preset)
    unit = stack.serve(unit, env, preset)
    try:
        cid = unit.extra["container_id"]
        deadline = time.monotonic() + 20
        text, offset = "", 0
        while "listening on" not in text and time.monotonic() < deadline:
            more, offset = stack.logs(unit, offset)
            text += more
            time.sleep(0.2)
        lines = text.splitlines()
        # stdout and stderr merged in time order, stamps stripped
        assert lines[0].startswith("INFO vLLM API server version") and lines[1].startswith("INFO non-default args")
        assert any(line.startswith("replay server") for line in lines), lines
        assert stack.logs(unit, offset) == ("", offset)
        since = [c for c in box.docker_calls("logs") if "--since" in c][-1]
        assert since == ["logs", "--timestamps", "--since", format_timestamp(offset), cid]
        # New container output: only that comes back, with the offset moved past it.
        late = time.time_ns()
        with open(box.state / "containers" / cid / "log.jsonl", "a") as fh:
            fh.write(json.dumps({"stream": "stderr", "log": "WARNING late line\n", "time": late}) + "\n")
        assert stack.logs(unit, offset) == ("WARNING late line\n", late)
        assert Path(unit.log_path).read_text() == text + "WARNING late line\n"  # the mirror, once each
        assert stack.alive(unit)
    finally:
        assert stack.destroy(unit) is True
    assert not stack.alive(unit)
    assert stack.logs(unit, offset) == ("", offset)  # gone: no text, no error
    assert stack.destroy(unit) is False  # idempotent: a missing unit is reported, not an error


def test_timestamps_round_trip():
    ns = 1_777_777_777_123_456_789
    assert format_timestamp(ns) == "2026-05-03T03:09:37.123456789Z"
    assert parse_timestamp(format_timestamp(ns) + " hello\n") == (ns, "hello\n")
    assert parse_timestamp("2026-05-03T05:09:37.5+02:00 x") == (1_777_777_777_500_000_000, "x")
    assert parse_timestamp("no stamp here") is None


# -- a whole launch on the docker stack --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_collects_the_container_log_and_destroys(box: DockerBox):
    code, out, err = box.cli("launch", "local", ENV, PRESET, "--mission", "hello", "--json",
                             "--probe-long-tokens", "2000", timeout=240)
    assert code == 0, f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
    run_dir, rec = box.project.only_run()
    assert rec["status"] == "ok" and rec["stack"] == "local-vllm-docker" and rec["unit"] == UNIT
    assert rec["key"]["gpu"] == "H100 80GB HBM3 80 GB"
    # Provenance: the image as served and its id as docker reports it (the tag alone can move).
    image = "vllm/vllm-openai:v0.30.0"
    assert rec["engine"]["image"] == image
    assert rec["engine"]["image_digest"] == "sha256:" + hashlib.sha256(image.encode()).hexdigest()
    unit_log = (run_dir / "unit.log").read_text()
    # The whole container log from creation, once, stamps stripped, in time order.
    assert unit_log.startswith("INFO vLLM API server version 0.30.0 (stand-in image vllm/vllm-openai:v0.30.0)\n")
    assert unit_log.count("INFO non-default args") == 1 and "replay server" in unit_log
    # The engine's KV lines, from that log onto the record's serving section (a GPU record too).
    assert rec["serving_config"]["kv_cache_tokens"] == "514752" and rec["serving_config"]["kv_cache_gib"] == "31.42"
    assert rec["times"]["destroyed"] and box.project.ledger() == {} and box.containers() == []
    assert len(box.docker_calls("rm")) == 1
    assert SECRET_VALUE not in (box.state / "calls.jsonl").read_text()
    assert not any(SECRET_VALUE in p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
