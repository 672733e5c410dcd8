"""What a launch's arguments may be, checked before anything is written or served: the
environment, preset and mission are names (never paths) and the effort one opencode accepts.
`launch` and `matrix` (each cell is a launch) both read these rules."""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import UserError
from harness.opencode.config import EFFORTS
from harness.records.paths import ProjectPaths

# What the EFFORT argument takes: a level opencode sends as `--variant` (a model with no such
# variant is run at its own default, recorded as `default`), or `default` (no `--variant`).
ACCEPTED_EFFORTS = (*EFFORTS, "default")
# vllm-on-tap's name rule (harness/vot/schema/*.schema.json), with a length a path can hold.
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")
MISSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# The child of `--detach` writes its run id to the file this variable names, once it is known.
ANNOUNCE_VAR = "LLMS_BENCHMARK_ANNOUNCE"


def check_launch_inputs(root: Path, environment: str, preset: str, effort: str, mission: str) -> None:
    """Refuse, before anything is written or served, an argument no launch could use."""
    paths = ProjectPaths(root)
    for value, what, folder, pattern in (
        (environment, "ENVIRONMENT", paths.environments, NAME),
        (preset, "PRESET", paths.presets, NAME),
        (mission, "--mission", paths.missions, MISSION_NAME),
    ):
        if not pattern.fullmatch(value):
            known = sorted(p.stem for p in folder.glob("*.yaml")) if what != "--mission" else \
                sorted(p.parent.name for p in folder.glob("*/mission.yaml"))
            kind = ("a mission folder of missions/, in letters, digits, '_' and '-'" if what == "--mission" else
                    f"a file of {folder.name}/, in lower-case letters, digits and '-'")
            raise UserError(f"{value[:120]!r} is not a name: {what} names {kind} (never a path)", file=folder,
                            field=what,
                            fix=f"use one of: {', '.join(known) or '(none)'}")
    if effort not in ACCEPTED_EFFORTS:
        raise UserError(f"effort {effort[:120]!r} is not one opencode accepts", field="EFFORT",
                        fix=f"use one of: {', '.join(ACCEPTED_EFFORTS)} ({', '.join(EFFORTS)} are sent as "
                            "opencode's --variant where the served model has that variant; `default` sends none)")
