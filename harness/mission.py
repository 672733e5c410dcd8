"""Missions: `missions/<name>/mission.yaml`, its prompt, its workspace template.

Every run gets a fresh copy of the workspace, so no run can see another's files.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from harness.errors import UserError
from harness.sandbox.untrusted import relative_inside
from harness.vot.loader import is_file, load_yaml

MANIFEST = "mission.yaml"
DEFAULT_MISSION = "observability"  # the benchmark's mission; `hello` is the smallest


class MissionManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    prompt: str = Field(min_length=1, description="prompt file, relative to the mission folder")
    workspace: str = Field(min_length=1, description="workspace template folder, relative to the mission folder")
    report: str = Field(min_length=1, description="where the agent's report lands, relative to the workspace")
    min_context: int = Field(gt=0, description="smallest --max-model-len a preset needs for this mission")
    time_cap_minutes: float = Field(gt=0)
    stall_minutes: float = Field(gt=0, description="no new opencode event for this long ends the run")
    disabled_tools: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]] = Field(
        default_factory=list, description="opencode tools this mission turns off (e.g. task: a subagent a small "
        "model delegates to and loses the task in); the smoke runs with the same set")
    agent_steps: int | None = Field(None, gt=0, description="opencode's own step limit (agent.build.steps): "
                                    "after this many agentic iterations it forces a text-only answer, so a "
                                    "model that keeps calling tools still ends its run cleanly")
    setup: str | None = Field(None, description="Python file (relative to the mission folder) whose "
                              "start(workspace, run_dir) starts what the mission observes; its .env reaches "
                              "the agent, its .stop() ends it all")
    drive_record: str | None = Field(None, description="the scenario's drive record, relative to the workspace")
    drive_user_agent: str | None = Field(None, description="the User-Agent prefix of the scenario's requests: "
                                         "when set, a run yields a row only if the telemetry store shows the "
                                         "scenario's requests inside the mission (the harness's drive gate)")
    signal_log: str | None = Field(None, description="the agent's query log (one JSON line per call), "
                                   "relative to the workspace")


class Mission(BaseModel):
    manifest: MissionManifest
    dir: Path
    prompt_text: str
    sha256: str

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def workspace_dir(self) -> Path:
        return self.dir / self.manifest.workspace


def _pydantic_to_user_error(exc: ValidationError, path: Path) -> UserError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or None
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(MissionManifest.model_fields)
        return UserError(f"unknown key '{field}'", file=path, field=field, fix=f"the known keys are: {allowed}")
    if err["type"] == "missing":
        return UserError("is required", file=path, field=field, fix=f"add `{field}:` to the manifest")
    return UserError(msg, file=path, field=field, fix="see missions/hello/mission.yaml for a valid manifest")


def _hash_tree(folder: Path, extra: list[Path]) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file()) + extra
    for path in files:
        digest.update(str(path.relative_to(folder.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def load_mission_dir(folder: Path) -> Mission:
    path = folder / MANIFEST
    data = load_yaml(path)
    try:
        manifest = MissionManifest.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_to_user_error(exc, path) from None
    if manifest.name != folder.name:
        raise UserError(f"name '{manifest.name}' differs from its folder '{folder.name}'", file=path,
                        field="name", fix=f"set name: {folder.name}")
    for key in ("prompt", "workspace", "setup"):
        value = getattr(manifest, key)
        if value is not None and not _inside(folder, value):
            raise UserError(f"{key} {value!r} lies outside the mission folder", file=path, field=key,
                            fix=f"give a path relative to {folder}, without '..'")
    for key in ("report", "drive_record", "signal_log"):
        value = getattr(manifest, key)
        if value is not None and not _workspace_relative(value):
            raise UserError(f"{key} {value!r} lies outside the workspace", file=path, field=key,
                            fix="give a path relative to the workspace, without '..' (the harness reads "
                                "what the agent writes only inside its workspace)")
    prompt = folder / manifest.prompt
    if not is_file(prompt):
        raise UserError(f"prompt file {manifest.prompt} does not exist", file=path, field="prompt",
                        fix=f"create {prompt} or point `prompt` at the mission's prompt file")
    workspace = folder / manifest.workspace
    if not _is_dir(workspace):
        raise UserError(f"workspace folder {manifest.workspace} does not exist", file=path, field="workspace",
                        fix=f"create {workspace} with the files the agent starts from")
    if manifest.setup and not is_file(folder / manifest.setup):
        raise UserError(f"setup file {manifest.setup} does not exist", file=path, field="setup",
                        fix=f"create {folder / manifest.setup} with a start(workspace, run_dir) function")
    try:
        text = prompt.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError("the prompt file is not UTF-8 text", file=prompt, fix="save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"the prompt file cannot be read: {exc.strerror or exc}", file=prompt) from None
    if not text.strip():
        raise UserError("the prompt file is empty", file=prompt, fix="write the mission's prompt")
    return Mission(manifest=manifest, dir=folder, prompt_text=text,
                   sha256=_hash_tree(workspace, [path, prompt]))


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name the OS refuses (too long, ...)
        return False


def _inside(folder: Path, relative: str) -> bool:
    """Whether `relative` names something inside `folder` (a manifest never reaches outside it)."""
    try:
        return (folder / relative).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def _workspace_relative(value: str) -> bool:
    try:
        relative_inside(value)
    except ValueError:
        return False
    return True


def load_mission(root: Path, name: str) -> Mission:
    folder = root / "missions" / name
    if name in ("", ".", "..") or "/" in name or "\\" in name or not is_file(folder / MANIFEST):
        known = sorted(p.parent.name for p in (root / "missions").glob(f"*/{MANIFEST}"))
        raise UserError(f"no mission named '{name}'", file=folder / MANIFEST,
                        fix=f"use one of: {', '.join(known) or '(none)'}")
    return load_mission_dir(folder)


def prepare_workspace(mission: Mission, dest: Path) -> Path:
    """A fresh copy of the template: isolation by construction, no clean-up needed."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(mission.workspace_dir, dest)
    return dest
