"""The replay stack: a scripted OpenAI-compatible server playing a trajectory file.

It is the deterministic model for tests and demos, and it is labelled as such
everywhere (GPU cell, run record, results) so a scripted row is never mistaken
for a model's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.errors import PreflightError
from harness.replay.trajectory import load_trajectory
from harness.stacks.base import GpuCell
from harness.stacks.local_process import API_KEY_ENV, LocalProcessStack
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


REPLAY_LABEL = "replay (scripted trajectory, no GPU)"


class ReplayStack(LocalProcessStack):
    name = "replay"
    ready_timeout_s = 30
    stop_grace_s = 5.0
    gpu_cell = GpuCell(REPLAY_LABEL, 0)

    def trajectory_path(self, preset: ResolvedPreset) -> Path:
        return (self.root / preset.model).resolve()

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        path = self.trajectory_path(preset)
        if not path.is_file():
            raise PreflightError(
                f"the replay stack plays a trajectory file, and {preset.model} does not exist",
                file=preset.path,
                field="model",
                fix="set model to a trajectory YAML path relative to the project root, e.g. replay/hello.yaml",
            )
        load_trajectory(path)  # a malformed trajectory is refused before serving
        return super().preflight(env, preset)

    def command(self, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
        argv = [
            sys.executable, "-m", "harness.replay.server",
            "--trajectory", str(self.trajectory_path(preset)),
            "--host", self.host,
            "--port", str(port),
            "--served-model-name", preset.served_name,
            "--max-model-len", str(preset.max_model_len or 65536),
            "--served-log", str(self.run_dir / f"vot-{preset.name}.served.jsonl"),  # ground truth for tests
        ]
        if API_KEY_ENV in preset.env:
            argv += ["--api-key-env", API_KEY_ENV]  # the variable's name; the key stays in the environment
        return argv

    def plan(self, env: Environment, preset: ResolvedPreset):
        unit = super().plan(env, preset)
        unit.scripted = True
        unit.extra["served_log"] = str(self.run_dir / f"{unit.name}.served.jsonl")
        return unit

    def serve(self, unit, env: Environment, preset: ResolvedPreset):
        Path(unit.extra["served_log"]).unlink(missing_ok=True)  # this unit's requests only
        return super().serve(unit, env, preset)
