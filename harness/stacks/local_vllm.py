"""`local-vllm`: `vllm serve` as a background process on a Linux box with NVIDIA GPUs,
exactly as vllm-on-tap runs it (PID and log under `.vot/run/`)."""

from __future__ import annotations

import shutil
import subprocess

from harness.errors import PreflightError
from harness.stacks.vllm_log import kv_facts
from harness.stacks import local_vllm_cpu as cpu
from harness.stacks.base import GpuCell, Unit
from harness.stacks.local_process import LocalProcessStack
from harness.vot import render
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset



def nvidia_gpu_cell(env: Environment) -> GpuCell:
    """`nvidia-smi --query-gpu=name,memory.total`: 'NVIDIA A100-SXM4-80GB, 81920 MiB' → 'A100-SXM4-80GB 80 GB'."""
    if shutil.which("nvidia-smi") is None:
        raise PreflightError(
            "nvidia-smi is not on PATH: this stack needs an NVIDIA GPU and its driver",
            file=env.path, field="stack",
            fix="run on a machine with an NVIDIA GPU, or use the `cpu` environment (the embedded default)",
        )
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        raise PreflightError(f"nvidia-smi failed: {exc}", file=env.path, field="stack",
                             fix="check the NVIDIA driver (`nvidia-smi` must answer)") from exc
    rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
    if not rows:
        raise PreflightError("nvidia-smi lists no GPU", file=env.path, field="stack",
                             fix="check the NVIDIA driver and that a GPU is visible")
    name, mem_mib = rows[0][0].strip(), float(rows[0][1])
    label = f"{name.removeprefix('NVIDIA ')} {round(mem_mib / 1024)} GB"
    if len(rows) > 1:
        label = f"{len(rows)}× {label}"
    return GpuCell(label, len(rows))


class LocalVllmStack(LocalProcessStack):
    name = "local-vllm"
    ready_timeout_s = 15 * 60
    stop_grace_s = 60.0

    def fatal_patterns(self) -> tuple[str, ...]:
        # Both seen in the real vLLM 0.32's log when its engine cannot start (e.g. a KV cache too
        # small for --max-model-len); a bad flag or a bad config exits the process (status 2 / 1).
        return ("EngineCore failed to start", "Engine core initialization failed")

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        if cpu.is_cpu(env):
            return cpu.preflight(self, env, preset)
        if shutil.which(str(env.config.get("vllm") or "vllm")) is None:
            raise PreflightError(
                "`vllm` is not installed on this machine (not on PATH)",
                file=env.path, field="stack",
                fix="install it (`uv tool install vllm` or `pip install vllm`) on a Linux box with an "
                    "NVIDIA GPU, or use the `cpu` environment (the embedded default)",
            )
        cell = nvidia_gpu_cell(env)
        self.check_port(env)
        return cell

    def command(self, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
        # An argv list, never a shell line: JSON values such as --speculative-config survive intact.
        if cpu.is_cpu(env):
            return cpu.command(self, env, preset, port)
        return [str(env.config.get("vllm") or "vllm"), "serve", preset.model, "--host", self.host, "--port", str(port),
                "--served-model-name", preset.served_name, *render.argv(preset.vllm_args)]

    def extra_env(self, env: Environment, preset: ResolvedPreset) -> dict[str, str]:
        return cpu.serve_env(env, preset) if cpu.is_cpu(env) else {}

    def describe(self, unit: Unit, env: Environment, preset: ResolvedPreset,
                 log_text: str) -> dict[str, str | list[str]]:
        return cpu.describe(self, env, preset, log_text) if cpu.is_cpu(env) else kv_facts(log_text)
