"""Preflight: everything checked before anything bills.

The environment and the preset load and validate, the preset carries tool calling
and enough context for the mission, its env names are set, the stack's own checks
pass (tools installed, GPU present, port free), opencode is installed at the pinned
version, and the GPU cell is known.
"""

from __future__ import annotations

from dataclasses import dataclass
import shutil
from pathlib import Path

from harness.errors import PreflightError
from harness.sandbox.confine import Sandbox, detect
from harness.extras import require_mission
from harness.mission import Mission, load_mission
from harness.opencode.binary import find_opencode, opencode_version
from harness.serving.preflight_fit import kv_fit, refuse_unless_fits
from harness.stacks.base import GpuCell, Stack
from harness.stacks.registry import get_stack
from harness.vot.environment import Environment, load_environment
from harness.vot.preset import ResolvedPreset, load_preset, missing_env


@dataclass
class Preflight:
    env: Environment
    preset: ResolvedPreset
    stack: Stack
    gpu: GpuCell
    mission: Mission | None
    opencode: Path | None
    opencode_version: str | None
    sandbox: Sandbox = Sandbox("none")
    kv_fit: list[str] | None = None  # the KV-fit check's figures (None: not applicable)


def check_preset_for_agent(preset: ResolvedPreset, mission: Mission | None) -> None:
    if not preset.tool_calling:
        raise PreflightError(
            "the preset does not enable tool calling: the agent could only answer in prose",
            file=preset.path, field="vllm_args",
            fix="add `--enable-auto-tool-choice: true` and `--tool-call-parser: <parser for the model>`",
        )
    if mission is None:
        return
    need = mission.manifest.min_context
    have = preset.max_model_len
    if have is None or have < need:
        raise PreflightError(
            f"--max-model-len is {have or 'not set'}, below the {need} tokens the '{mission.name}' mission needs "
            "(opencode's system prompt and tools alone take ~15k)",
            file=preset.path, field="vllm_args.--max-model-len",
            fix=f"set `--max-model-len: {need}` or more (the model's native maximum when the KV cache holds it)",
        )


def run_preflight(root: Path, env_name: str, preset_name: str, mission_name: str | None,
                  *, need_opencode: bool = True, no_sandbox: bool = False) -> Preflight:
    env = load_environment(root, env_name)
    stack = get_stack(env.stack, root)
    preset = load_preset(root, preset_name).resolve(env.stack)
    missing = missing_env(preset)
    if missing:
        raise PreflightError(
            f"the preset needs {', '.join(missing)} exported in this shell (values are passed by name, never stored)",
            file=preset.path, field="env", fix=f"export {missing[0]}=... before launching",
        )
    mission = load_mission(root, mission_name) if mission_name else None
    check_preset_for_agent(preset, mission)
    if mission is not None:  # its system under test is an extra (harness/extras.py), checked before serving
        require_mission(mission.name, mission.dir)
    # Weights + KV at --max-model-len against the GPU memory: before the stack's own checks
    # when the environment names its GPU, after them (from the GPU found) otherwise.
    fit = kv_fit(env, preset)
    refuse_unless_fits(fit, preset)
    gpu = stack.preflight(env, preset)
    check_mission = getattr(stack, "check_mission", None)  # optional: a stack whose model is a script
    if mission is not None and check_mission is not None:
        check_mission(preset, mission)
    if fit is None:
        fit = kv_fit(env, preset, gpu.label)
        refuse_unless_fits(fit, preset)
    binary = version = None
    sandbox = Sandbox("none")
    if need_opencode:
        binary = find_opencode(root)
        version = opencode_version(binary)
        if shutil.which("rg") is None:
            # opencode's glob and grep run ripgrep; without it opencode tries to download it from
            # GitHub, which fails offline: both tools would fail whatever the model.
            raise PreflightError("ripgrep (`rg`) is not on PATH: opencode's glob and grep tools need it",
                                 fix="run `make setup` (it installs Debian's ripgrep), or install ripgrep")
        sandbox = detect(no_sandbox)  # the agent runs sandboxed, or the user said not to
    return Preflight(env, preset, stack, gpu, mission, binary, version, sandbox, fit.lines if fit else None)
