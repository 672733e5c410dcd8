"""What a mission runs beside the agent (a telemetry store, a stack to observe),
started from the mission's own `setup` file and always stopped by the launch.

The setup file defines `start(workspace: Path, run_dir: Path) -> services`, where
`services.env` is a mapping of environment variables for the agent (a `PATH` value
is prepended to the agent's PATH) and `services.stop()` ends every process it started.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Protocol

from harness.errors import UserError
from harness.mission import Mission


# What a mission's services and its telemetry store inherit from the launch: enough to run
# Python, nothing else. Cloud credentials (AZURE_*, AWS_*), tokens (HF_TOKEN) and the unit's
# key stay behind: a service the agent can drive must not hold what it could leak.
SERVICE_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH",
                    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "SYSTEMROOT")


def service_env(**extra: str) -> dict[str, str]:
    """A minimal environment for a mission's service: the kept names, then `extra`."""
    env = {k: v for k in SERVICE_ENV_KEEP if (v := os.environ.get(k)) is not None}
    env.update(extra)
    return env


class MissionServices(Protocol):
    env: dict[str, str]

    def stop(self) -> None: ...


def _setup_module(mission: Mission):
    path = mission.dir / mission.manifest.setup
    name = f"llms_benchmark_mission_setup_{mission.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError("cannot load the setup file", file=path, field="setup")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def start_services(mission: Mission, workspace: Path, run_dir: Path) -> MissionServices | None:
    if not mission.manifest.setup:
        return None
    module = _setup_module(mission)
    path = mission.dir / mission.manifest.setup
    if not callable(getattr(module, "start", None)):
        raise UserError("the setup file defines no start(workspace, run_dir)", file=path, field="setup",
                        fix="define start(workspace: Path, run_dir: Path) returning an object with .env and .stop()")
    return module.start(workspace, run_dir)


def merge_env(agent_env: dict[str, str], services: MissionServices | None) -> dict[str, str]:
    if services is None:
        return agent_env
    merged = dict(agent_env)
    for key, value in services.env.items():
        if key == "PATH":
            merged["PATH"] = f"{value}:{agent_env.get('PATH', '')}"
        else:
            merged[key] = value
    return merged


def check_mission(mission: Mission, workspace: Path, run_dir: Path, duration: float) -> dict:
    """The mission's own end-to-end check (its setup file's `check`), if it has one."""
    if not mission.manifest.setup:
        raise UserError(f"mission '{mission.name}' runs nothing beside the agent: there is nothing to check",
                        field="setup")
    check_key_claims(mission)  # before anything starts: a key whose claims cannot be matched rules nothing
    module = _setup_module(mission)
    if not callable(getattr(module, "check", None)):
        raise UserError("the setup file defines no check(workspace, run_dir, duration)",
                        file=mission.dir / mission.manifest.setup, field="setup")
    return module.check(workspace, run_dir, duration)


def check_key_claims(mission: Mission) -> None:
    """The hidden key states, per planted defect, the claims that count as finding it, in the
    vocabulary the mission declares (claims.yaml); refused, naming the defect and field, if not."""
    from harness.telemetry.claims import VocabularyError, check_key, load_vocabulary

    key = mission.dir / "key" / "defects.yaml"
    if not key.is_file():
        return
    try:
        problems = check_key(key, load_vocabulary(mission.dir))
    except VocabularyError as exc:
        raise UserError(str(exc), file=mission.dir / "claims.yaml",
                        fix="declare kinds (each with a category), directions and services") from None
    if problems:
        raise UserError("the key's claims do not check: " + "; ".join(problems[:5]), file=key, field="claims",
                        fix="state each defect's claims as {kind, direction, scope} from the mission's claims.yaml")
