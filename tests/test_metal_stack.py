"""The local-vllm-metal stack driven through stand-in `uname`, `sw_vers`, `sysctl` and `vllm`
executables on PATH that record their argv and answer as a Mac does (tests/fakes/standins.py).

The platform is read from those tools, never from Python's `platform` module, so the same
checks that refuse this Linux box (asserted with the real tools too) accept the stand-in
Mac. Asserted: the GPU cell from sysctl, the exact `vllm serve` line with the preset's
metal model, the unified-memory check with its macOS margin, and the refusals.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from conftest import Project

sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
import standins  # noqa: E402

from harness.stacks.local_vllm_metal import usable_memory_gb  # noqa: E402

ENV = "local-metal"
PRESET = "metal-hello"
GIB = 1024**3
SYSCTL_ARGS = "-n machdep.cpu.brand_string hw.memsize"


def mac(chip: str = "Apple M4 Pro", memory_gb: int = 24, system: str = "Darwin", machine: str = "arm64",
        macos: str = "15.3.1") -> dict:
    return {
        "uname": {"-s": [0, f"{system}\n"], "-m": [0, f"{machine}\n"]},
        "sw_vers": {"-productVersion": [0, f"{macos}\n"]},
        "sysctl": {SYSCTL_ARGS: [0, f"{chip}\n{memory_gb * GIB}\n"]},
    }


PRESET_DATA = {
    "name": PRESET,
    "description": "test preset: an FP8 model on NVIDIA, its MLX build on a Mac",
    "model": "Qwen/Qwen3-8B-FP8",
    "served_model_name": "qwen3-8b",
    "gpu_memory_gb": 40,
    "vllm_args": {
        "--max-model-len": 65536,
        "--gpu-memory-utilization": 0.92,
        "--enable-auto-tool-choice": True,
        "--tool-call-parser": "hermes",
        "--speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}',
    },
    "env": [],
    "stacks": {"local-vllm-metal": {"model": "mlx-community/Qwen3-8B-4bit", "gpu_memory_gb": 12,
                                    "vllm_args": {"--speculative-config": False, "--language-model-only": True}}},
}


@dataclass
class MacBox:
    project: Project
    state: Path
    bin: Path
    port: int

    def install(self, tools: dict, vllm: bool = True) -> None:
        standins.install(self.bin, self.state, tools, docker=False, vllm=vllm)

    def calls(self, tool: str | None = None) -> list[list[str]]:
        return standins.calls(self.state, tool)

    def preset(self, **changes) -> None:
        data = {**PRESET_DATA, **changes}
        self.project.add_preset(PRESET, yaml.safe_dump(data, sort_keys=False))

    def cli(self, *args: str, timeout: float = 90) -> tuple[int, str, str]:
        return self.project.run_cli(list(args), timeout=timeout)


@pytest.fixture
def box(project: Project, tmp_path: Path) -> Iterator[MacBox]:
    state, bin_dir = tmp_path / "standin-state", tmp_path / "bin"
    with socket.socket() as s:  # vLLM stacks take a fixed port: pick a free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = MacBox(project, state, bin_dir, port)
    b.install(mac())
    standins.configure(state, trajectory=str(project.root / "replay" / "hello.yaml"))
    project.add_environment(ENV, f"name: {ENV}\nstack: local-vllm-metal\nconfig:\n  port: {port}\n")
    b.preset()
    project.env["PATH"] = f"{bin_dir}:{project.env['PATH']}"
    yield b


def flat(text: str) -> str:
    return " ".join(text.split())


PLATFORM_CALLS = [["uname", "-s"], ["uname", "-m"], ["sw_vers", "-productVersion"]]


# -- the memory margin ----------------------------------------------------------------------------------
@pytest.mark.parametrize("total, usable", [(16, 8), (24, 16), (32, 24), (36, 27), (64, 48), (128, 96)])
def test_macos_keeps_max_of_8_gb_and_a_quarter(total, usable):
    assert usable_memory_gb(total) == usable


# -- preflight -------------------------------------------------------------------------------------------
def test_preflight_reads_the_chip_and_memory_from_sysctl(box: MacBox):
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["stack"] == "local-vllm-metal" and data["gpu"] == "Apple M4 Pro 24 GB"
    assert data["model"] == "mlx-community/Qwen3-8B-4bit"  # the metal override, not the FP8 build
    assert box.calls() == [*PLATFORM_CALLS, ["sysctl", *SYSCTL_ARGS.split()]]


@pytest.mark.parametrize("system, machine", [("Linux", "x86_64"), ("Linux", "aarch64"), ("Darwin", "x86_64")])
def test_not_apple_silicon_is_refused(box: MacBox, system, machine):
    box.install(mac(system=system, machine=machine))
    code, out, err = box.cli("serve", ENV, PRESET)
    assert code == 2, (out, err)
    assert f"needs macOS on Apple Silicon (Darwin arm64); this machine is {system} {machine}" in flat(err)
    assert f"{ENV}.yaml" in flat(err) and "fix:" in err
    assert box.calls() == [["uname", "-s"], ["uname", "-m"]]  # no sysctl, no vllm
    assert box.project.ledger() == {}


@pytest.mark.skipif(platform.system() == "Darwin", reason="asserts the refusal on a machine that is not a Mac")
def test_this_machine_with_its_real_tools_is_refused(box: MacBox):
    box.project.env["PATH"] = box.project.env["PATH"].split(":", 1)[1]  # the stand-ins off PATH
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello")
    assert code == 2 and "needs macOS on Apple Silicon" in flat(err), (out, err)
    assert f"this machine is {platform.system()} {os.uname().machine}" in flat(err)
    assert box.calls() == []


def test_old_macos_is_refused(box: MacBox):
    box.install(mac(macos="14.6.1"))
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello")
    assert code == 2 and "needs macOS 15 or later; this Mac runs macOS 14.6.1" in flat(err), err
    assert box.calls() == PLATFORM_CALLS


def test_missing_vllm_metal_names_the_brew_install(box: MacBox):
    box.install(mac(), vllm=False)
    box.project.env["PATH"] = f"{box.bin}:/usr/bin:/bin"
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello")
    assert code == 2, err
    assert "`vllm` (vllm-metal) is not installed" in flat(err)
    assert "brew tap vllm-project/vllm-metal https://github.com/vllm-project/vllm-metal" in flat(err)


@pytest.mark.parametrize("memory, need, fits", [(24, 16, True), (24, 17, False), (64, 48, True), (64, 49, False)])
def test_preset_memory_against_unified_memory(box: MacBox, memory, need, fits):
    box.install(mac(memory_gb=memory))
    box.preset(stacks={"local-vllm-metal": {**PRESET_DATA["stacks"]["local-vllm-metal"], "gpu_memory_gb": need}})
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello", "--json")
    if fits:
        assert code == 0, err
        assert json.loads(out)["gpu"] == f"Apple M4 Pro {memory} GB"
        return
    usable = usable_memory_gb(memory)
    assert code == 2, (out, err)
    text = flat(err)
    assert f"{PRESET}.yaml" in text and "field 'gpu_memory_gb'" in text
    assert (f"the preset needs {need} GB (gpu_memory_gb) but this Mac has {memory} GB of unified memory, of which "
            f"{usable:g} GB may go to the model after leaving {memory - usable:g} GB for macOS") in text
    assert "mlx-community" in text  # the fix names the metal override


def test_tensor_parallel_is_refused(box: MacBox):
    box.preset(stacks={"local-vllm-metal": {"model": "mlx-community/Qwen3-8B-4bit", "gpu_memory_gb": 12,
                                            "vllm_args": {"--tensor-parallel-size": 2}}})
    code, out, err = box.cli("preflight", ENV, PRESET, "--mission", "hello")
    assert code == 2 and "--tensor-parallel-size is 2" in flat(err), err


# -- serve / destroy through the CLI ------------------------------------------------------------------------
def test_serve_then_destroy_end_to_end(box: MacBox):
    code, out, err = box.cli("serve", ENV, PRESET, "--json")
    try:
        assert code == 0, err
        served = json.loads(out)
        assert served["base_url"] == f"http://127.0.0.1:{box.port}"
        [argv] = box.calls("vllm")
        assert argv == ["vllm", "serve", "mlx-community/Qwen3-8B-4bit", "--host", "127.0.0.1",
                        "--port", str(box.port), "--served-model-name", "qwen3-8b",
                        "--max-model-len", "65536", "--gpu-memory-utilization", "0.92",
                        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--language-model-only"]
        models = httpx.get(f"{served['base_url']}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["qwen3-8b"]
        assert (box.project.root / ".vot" / "run" / "vot-metal-hello.pid").is_file()
        assert "replay server" in (box.project.root / ".vot" / "run" / "vot-metal-hello.log").read_text()
        unit = box.project.ledger()[f"{ENV}/vot-{PRESET}"]
        assert unit["stack"] == "local-vllm-metal"
    finally:
        code, out, err = box.cli("destroy", ENV, PRESET)
    assert code == 0 and f"destroyed vot-{PRESET} on {ENV}" in out, (out, err)
    assert box.project.ledger() == {}
    assert not (box.project.root / ".vot" / "run" / "vot-metal-hello.pid").exists()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{box.port}/v1/models", timeout=2)
