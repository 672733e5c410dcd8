"""Stacks vllm-on-tap knows that this version does not serve yet: recognised, and
refused by preflight with a clear message before anything bills."""

from __future__ import annotations

from harness.errors import PreflightError
from harness.stacks.base import GpuCell
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


class UnsupportedStack:
    ready_timeout_s = 0.0

    def __init__(self, name: str) -> None:
        self.name = name

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        raise PreflightError(
            f"stack '{self.name}' is recognised but not yet supported by this version of llms-benchmark",
            file=env.path, field="stack",
            fix="use the `cpu` (embedded llama.cpp), `replay` or `local-gpu` (local-vllm) environment",
        )

    def fatal_patterns(self) -> tuple[str, ...]:
        return ()
