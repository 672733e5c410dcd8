"""The replay stack: a scripted OpenAI-compatible server playing a trajectory file.

It is the deterministic model for tests and demos, and it is labelled as such
everywhere (GPU cell, run record, results) so a scripted row is never mistaken
for a model's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.errors import PreflightError, UserError
from harness.mission import MANIFEST, Mission, load_mission_dir
from harness.replay.trajectory import load_trajectory
from harness.stacks.base import GpuCell
from harness.stacks.local_process import API_KEY_ENV, LocalProcessStack
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset


REPLAY_LABEL = "replay (scripted trajectory, no GPU)"


def _missions(root: Path) -> list[Mission]:
    """The project's missions that load; one that does not is not a candidate for the fix."""
    found = []
    for manifest in sorted((root / "missions").glob(f"*/{MANIFEST}")):
        try:
            found.append(load_mission_dir(manifest.parent))
        except UserError:
            continue
    return found


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

    def check_mission(self, preset: ResolvedPreset, mission: Mission) -> None:
        """A mission no scenario of the trajectory matches would be answered by the fallback
        alone: max_tokens of filler per turn at the fallback's pace, for as long as the
        mission's budget lasts (an hour, measured). Refused before anything is served."""
        trajectory = load_trajectory(self.trajectory_path(preset))
        if trajectory.find(mission.prompt_text) is not None:
            return
        covered = [m.name for m in _missions(self.root) if trajectory.find(m.prompt_text) is not None]
        fix = (f"add --mission {covered[0]}" if len(covered) == 1 else
               f"add --mission with one of: {', '.join(covered)}" if covered else
               f"add a scenario to {preset.model} whose `match` is a phrase of the '{mission.name}' prompt")
        raise PreflightError(
            f"preset {preset.name} plays {preset.model}, and none of its scenarios matches the "
            f"'{mission.name}' mission's prompt (it would get filler answers until the mission's budget ends)",
            file=preset.path, field="model", fix=fix)

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
