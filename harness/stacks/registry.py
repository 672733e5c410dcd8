"""Stack name → implementation. vllm-on-tap's `aca` is read as `azure`."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.stacks.base import Stack
from harness.stacks.llamacpp import LlamaCppStack
from harness.stacks.local_vllm import LocalVllmStack
from harness.stacks.local_vllm_docker import LocalVllmDockerStack
from harness.stacks.local_vllm_metal import LocalVllmMetalStack
from harness.stacks.replay import ReplayStack
from harness.stacks.unsupported import UnsupportedStack


def _azure(root: Path) -> Stack:
    from harness.stacks.azure import AzureStack  # the Azure SDK loads only when azure is used

    return AzureStack(root)


_STACKS = {
    "azure": _azure,
    "local-vllm": LocalVllmStack,
    "local-vllm-docker": LocalVllmDockerStack,
    "local-vllm-metal": LocalVllmMetalStack,
    "local-llamacpp": LlamaCppStack,
    "replay": ReplayStack,
}
# Recognised (vllm-on-tap has them) but refused by preflight until their issue lands.
_NOT_YET: tuple[str, ...] = ()


def get_stack(name: str, root: Path) -> Stack:
    name = "azure" if name == "aca" else name
    if name in _STACKS:
        return _STACKS[name](root)
    if name in _NOT_YET:
        return UnsupportedStack(name)
    raise UserError(f"unknown stack '{name}'", field="stack",
                    fix=f"use one of: {', '.join([*_STACKS, *_NOT_YET])}")
