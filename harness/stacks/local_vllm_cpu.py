"""`local-vllm` with `config.device: cpu`: the same `vllm serve <model> --host --port
--served-model-name <preset flags>` a GPU box runs, served by vLLM's CPU build (`make vllm`).

What differs, and only that:
- the model: an embedded model (harness/embedded) is served from its converted HF folder
  (`make vllm`; vLLM 0.32 does not load GGUF), with HF_HUB_OFFLINE=1; any other id is passed
  as it is (vLLM resolves it from the HF cache or the hub);
- the KV cache is `config.kv_cache_gib` GiB (VLLM_CPU_KVCACHE_SPACE, default 2); vLLM reads a
  preset's `--gpu-memory-utilization` as a share of RAM on CPU, and the explicit size wins: the
  flag is passed on and the record says so;
- both cores serve (VLLM_CPU_NUM_OF_RESERVED_CPU=0; vLLM's default keeps one for the frontend);
- refused by name, never dropped: FP8 (weights or KV cache) and speculative decoding, which this
  environment does not serve;
- `--chat-template <name>` naming one of harness/stacks/templates, and `--tool-parser-plugin <name>`
  naming one of harness/stacks/vllm_plugins (a tool parser vLLM loads into its own process), are
  served from there; the record names each with its sha256.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.embedded import models as embedded
from harness.errors import PreflightError
from harness.stacks.vllm_log import kv_facts
from harness.stacks.base import GpuCell
from harness.vot import render
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset

TEMPLATES = Path(__file__).parent / "templates"
PLUGINS = Path(__file__).parent / "vllm_plugins"
# Preset flags naming a file of ours: the folder it is looked up in (after the project root).
SHIPPED = {"--chat-template": TEMPLATES, "--tool-parser-plugin": PLUGINS}
DEFAULT_KV_GIB = 2
# The speed probe's long prompt on this device (as llama.cpp's CPU stack): vLLM's CPU prefill of
# Qwen2.5-Coder-1.5B ran at ~70 tok/s on 2 cores, so the probe's 82k target (65k under a 64k
# context) would prefill for over 15 min (measured: a launch still in it after 5 min).
PROBE_LONG_CAP = 4096


def is_cpu(env: Environment) -> bool:
    return env.config.get("device") == "cpu"


def kv_gib(env: Environment) -> int:
    return int(env.config.get("kv_cache_gib") or DEFAULT_KV_GIB)


def executable(env: Environment) -> str:
    from harness.vllm_cpu import vllm_executable

    return str(Path(env.config["vllm"]).expanduser()) if env.config.get("vllm") else str(vllm_executable())


def model_folder(preset: ResolvedPreset) -> tuple[Path, dict] | None:
    from harness.vllm_cpu import converted

    return converted(preset.model) if preset.model in embedded.MODELS else None


def _refuse(preset: ResolvedPreset, flag: str, why: str) -> None:
    raise PreflightError(f"{flag} {why}", file=preset.path, field=f"vllm_args.{flag}" if flag.startswith("--") else "model",
                         fix="remove it from this preset (or set the flag to false) to serve on the cpu device")


def check_flags(preset: ResolvedPreset) -> None:
    args = {k: v for k, v in preset.vllm_args.items() if v is not False}
    if "--speculative-config" in args:
        _refuse(preset, "--speculative-config", "(speculative decoding) is not served on the cpu device")
    if str(args.get("--quantization", "")).lower().startswith("fp8"):
        _refuse(preset, "--quantization", f"{args['--quantization']}: FP8 weights are not served on the cpu device")
    if str(args.get("--kv-cache-dtype", "")).lower().startswith("fp8"):
        _refuse(preset, "--kv-cache-dtype", f"{args['--kv-cache-dtype']}: an FP8 KV cache is not served on the cpu device")
    if "fp8" in preset.model.lower():
        _refuse(preset, "model", f"{preset.model}: FP8 weights are not served on the cpu device")


def template_path(root: Path, value: str, folder: Path = TEMPLATES) -> Path | None:
    for candidate in (root / value, folder / value):
        if candidate.is_file():
            return candidate
    return None


def shipped_files(root: Path, args: dict) -> dict[str, Path]:
    """The preset flags that name a file of ours (a chat template, a tool parser plugin): flag → path."""
    out = {}
    for flag, folder in SHIPPED.items():
        value = args.get(flag)
        if isinstance(value, str) and (path := template_path(root, value, folder)) is not None:
            out[flag] = path
    return out


def preflight(stack, env: Environment, preset: ResolvedPreset) -> GpuCell:
    from harness.stacks.llamacpp import cpu_label

    exe = executable(env)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise PreflightError(f"vLLM's CPU build is not installed ({exe} is missing)", file=env.path,
                             field="config.vllm" if env.config.get("vllm") else "config.device",
                             fix="run `make vllm` (its own venv, once: 302 s measured on 2 cores, see the README), "
                                 "or set config.vllm to a vllm executable")
    if preset.model in embedded.MODELS and model_folder(preset) is None:
        raise PreflightError(f"{preset.model} has no converted HF folder (vLLM does not load GGUF)",
                             file=preset.path, field="model", fix="run `make vllm` (it converts the embedded GGUFs)")
    check_flags(preset)
    tpl = preset.vllm_args.get("--chat-template")
    if isinstance(tpl, str) and template_path(stack.root, tpl) is None and "{" not in tpl:
        raise PreflightError(f"chat template {tpl} not found", file=preset.path, field="vllm_args.--chat-template",
                             fix=f"name a file under the project or one of {', '.join(p.name for p in TEMPLATES.iterdir())}")
    plugin = preset.vllm_args.get("--tool-parser-plugin")
    if isinstance(plugin, str) and template_path(stack.root, plugin, PLUGINS) is None:
        raise PreflightError(f"tool parser plugin {plugin} not found", file=preset.path,
                             field="vllm_args.--tool-parser-plugin",
                             fix=f"name a file under the project or one of {', '.join(p.name for p in PLUGINS.glob('*.py'))}")
    stack.check_port(env)
    stack.probe_long_cap = PROBE_LONG_CAP  # the launch reads it off the stack it preflighted
    return GpuCell(cpu_label(), 0)


def command(stack, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
    found = model_folder(preset)
    model = str(found[0]) if found else preset.model
    args = dict(preset.vllm_args)
    for flag, path in shipped_files(stack.root, args).items():
        args[flag] = str(path)
    return [executable(env), "serve", model, "--host", stack.host, "--port", str(port),
            "--served-model-name", preset.served_name, *render.argv(args)]


def serve_env(env: Environment, preset: ResolvedPreset) -> dict[str, str]:
    out = {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib(env)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    if model_folder(preset):
        out["HF_HUB_OFFLINE"] = "1"
    return out


def describe(stack, env: Environment, preset: ResolvedPreset, log_text: str) -> dict[str, str | list[str]]:
    """For the run record: no absolute path (records are committed)."""
    argv = command(stack, env, preset, 0)
    flags = [Path(a).name if os.sep in a else a for a in argv[2:]]
    flags = [f for f, prev in zip(flags, ["", *flags]) if prev != "--port" and f != "--port"]
    facts: dict[str, str | list[str]] = {"server": "vLLM (CPU build, vllm-cpu)", "flags": flags,
                                         "env": [f"{k}={v}" for k, v in sorted(serve_env(env, preset).items())]}
    if found := model_folder(preset):
        folder, stamp = found
        facts.update(model_folder=folder.name, model_sha256=stamp["sha256"],
                     model_source=f"converted from {stamp['gguf']} (sha256 {stamp['gguf_sha256']}) to {stamp['dtype']}")
    for flag, path in shipped_files(stack.root, preset.vllm_args).items():
        key = flag.removeprefix("--").replace("-", "_")
        facts[key] = path.name
        facts[f"{key}_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    if "--gpu-memory-utilization" in preset.vllm_args:
        facts["gpu_memory_utilization"] = (f"{preset.vllm_args['--gpu-memory-utilization']} passed on: vLLM's CPU "
                                           f"backend reads it as a share of RAM; VLLM_CPU_KVCACHE_SPACE={kv_gib(env)} wins")
    facts.update(kv_facts(log_text))
    return facts
