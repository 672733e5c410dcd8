"""`local-vllm-metal`: vllm-metal's `vllm serve` as a background process on a Mac with
Apple Silicon (macOS ≥ 15, arm64), exactly like `local-vllm` (PID and log under
`.vot/run/`), serving the preset's `local-vllm-metal` model (an MLX build).

The platform is read from the tools a Mac has — `uname -s` / `uname -m`, `sw_vers
-productVersion` and `sysctl -n machdep.cpu.brand_string hw.memsize` — found on PATH, never
from Python's `platform` module, so tests on Linux exercise the checks through stand-in
executables exactly as a Mac answers them.

Memory: Apple Silicon shares one memory between macOS and the GPU. The preset's
`gpu_memory_gb` (its `local-vllm-metal` override first) must fit in the machine's memory
less the room left for macOS: max(8 GB, 25 %) of it. 25 % matches Metal's default GPU
working-set limit (about three quarters of the memory on larger Macs); 8 GB is the least
macOS and the harness itself need on small ones. A 24 GB Mac thus offers 16 GB, a 64 GB
one 48 GB. A preset that declares no memory is not checked.
"""

from __future__ import annotations

import shutil
import subprocess

from harness.errors import PreflightError
from harness.stacks.base import GpuCell
from harness.stacks.local_vllm import LocalVllmStack
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


MACOS_MIN_MAJOR = 15
MACOS_HEADROOM_MIN_GB = 8.0
MACOS_HEADROOM_FRACTION = 0.25
GIB = 1024**3

INSTALL_FIX = ("install vllm-metal: `brew tap vllm-project/vllm-metal https://github.com/vllm-project/vllm-metal "
               "&& brew install vllm-project/vllm-metal/vllm-metal`")


def usable_memory_gb(total_gb: float) -> float:
    """What a model may take of a Mac's unified memory: all but max(8 GB, 25 %)."""
    return total_gb - max(MACOS_HEADROOM_MIN_GB, total_gb * MACOS_HEADROOM_FRACTION)


def _gb(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


class LocalVllmMetalStack(LocalVllmStack):
    name = "local-vllm-metal"
    ready_timeout_s = 15 * 60
    stop_grace_s = 60.0

    def fatal_patterns(self) -> tuple[str, ...]:
        # vllm-metal#831: Gemma 4 MLX builds crash unless --language-model-only.
        return (*super().fatal_patterns(), "Can't load video processor")

    @staticmethod
    def _ask(env: Environment, *argv: str) -> str:
        if shutil.which(argv[0]) is None:
            raise PreflightError(
                f"`{argv[0]}` is not on PATH, so this cannot be macOS: local-vllm-metal needs a Mac with Apple Silicon",
                file=env.path, field="stack",
                fix="serve on a Mac (macOS ≥ 15, arm64), or use the `local-gpu` or `cpu` environment",
            )
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        except (subprocess.SubprocessError, OSError) as exc:
            raise PreflightError(f"`{' '.join(argv)}` failed: {exc}", file=env.path, field="stack",
                                 fix="run on a Mac with Apple Silicon") from exc
        if done.returncode != 0:
            raise PreflightError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {done.stderr.strip()[:200]}",
                                 file=env.path, field="stack", fix="run on a Mac with Apple Silicon")
        return done.stdout.strip()

    def check_platform(self, env: Environment) -> None:
        system = self._ask(env, "uname", "-s")
        machine = self._ask(env, "uname", "-m")
        if system != "Darwin" or machine != "arm64":
            rosetta = (" (on Apple Silicon, `uname -m` says x86_64 under Rosetta: run llms-benchmark with an "
                       "arm64 Python)") if system == "Darwin" else ""
            raise PreflightError(
                f"local-vllm-metal needs macOS on Apple Silicon (Darwin arm64); this machine is {system} {machine}",
                file=env.path, field="stack",
                fix="serve on a Mac with Apple Silicon, or use the `local-gpu` (NVIDIA) or `cpu` environment" + rosetta,
            )
        version = self._ask(env, "sw_vers", "-productVersion")
        try:
            major = int(version.split(".")[0])
        except ValueError:
            major = 0
        if major < MACOS_MIN_MAJOR:
            raise PreflightError(
                f"vllm-metal needs macOS {MACOS_MIN_MAJOR} or later; this Mac runs macOS {version or '(unknown)'}",
                file=env.path, field="stack", fix=f"update macOS to {MACOS_MIN_MAJOR} or later",
            )

    def mac_cell(self, env: Environment) -> tuple[GpuCell, float]:
        """`sysctl -n machdep.cpu.brand_string hw.memsize` → ('Apple M4 Pro 24 GB', 24.0)."""
        lines = self._ask(env, "sysctl", "-n", "machdep.cpu.brand_string", "hw.memsize").splitlines()
        try:
            chip, total_gb = lines[0].strip(), int(lines[1].strip()) / GIB
        except (IndexError, ValueError) as exc:
            raise PreflightError(f"cannot read the chip and memory from sysctl: {lines!r}",
                                 file=env.path, field="stack", fix="run on a Mac with Apple Silicon") from exc
        return GpuCell(f"{chip} {round(total_gb)} GB", 1), total_gb

    def check_memory(self, env: Environment, preset: ResolvedPreset, total_gb: float) -> None:
        need = preset.gpu_memory_gb
        if need is None:
            return
        usable = usable_memory_gb(total_gb)
        if need > usable:
            headroom = total_gb - usable
            raise PreflightError(
                f"the preset needs {_gb(need)} GB (gpu_memory_gb) but this Mac has {_gb(round(total_gb))} GB of "
                f"unified memory, of which {_gb(usable)} GB may go to the model after leaving {_gb(headroom)} GB "
                f"for macOS (max(8 GB, 25 %))",
                file=preset.path, field="gpu_memory_gb",
                fix="serve a smaller model on this Mac (a `stacks: {local-vllm-metal: {model: mlx-community/..., "
                    "gpu_memory_gb: ...}}` override), or use a larger Mac or the `local-gpu` environment",
            )

    def check_tensor_parallel(self, env: Environment, preset: ResolvedPreset) -> None:
        tp = preset.vllm_args.get("--tensor-parallel-size")
        if tp not in (None, False, True) and str(tp) not in ("1", "1.0"):
            raise PreflightError(
                f"--tensor-parallel-size is {tp}, but a Mac has one GPU (vllm-metal serves TP=1 only)",
                file=preset.path, field="vllm_args.--tensor-parallel-size",
                fix="drop it in the preset's `stacks: {local-vllm-metal: {vllm_args: {--tensor-parallel-size: false}}}`",
            )

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        self.check_platform(env)
        if shutil.which("vllm") is None:
            raise PreflightError("`vllm` (vllm-metal) is not installed on this Mac (not on PATH)",
                                 file=env.path, field="stack", fix=INSTALL_FIX)
        cell, total_gb = self.mac_cell(env)
        self.check_memory(env, preset, total_gb)
        self.check_tensor_parallel(env, preset)
        self.check_port(env)
        return cell
