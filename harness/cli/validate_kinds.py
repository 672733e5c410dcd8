"""`validate <path>`: tell the kind of file from its folder and check it (a preset or an environment,
the vllm-on-tap model; a mission, which reads that model: so this sits above both)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.mission import load_mission
from harness.vot.environment import load_environment_file
from harness.vot.preset import load_preset_file

KINDS = (
    "a preset (.vot/presets/<name>.yaml)",
    "an environment (.vot/environments/<name>.yaml)",
    "a mission (missions/<name>/)",
)


def _mission_name(root: Path, path: Path) -> str | None:
    try:
        parts = path.resolve().relative_to(Path(root).resolve()).parts
    except ValueError:
        return None
    return parts[1] if len(parts) >= 2 and parts[0] == "missions" else None


def expand(root: Path, path: Path) -> list[Path]:
    """A folder of presets or environments (`.vot/presets/`), `missions/` or `.vot/` stands for each
    file or mission folder in it; anything else is itself."""
    path = Path(path)
    try:
        here = path.exists()
    except OSError:
        return [path]
    full = path if path.is_absolute() or here else Path(root) / path
    try:
        if not full.is_dir():
            return [path]
        resolved = full.resolve()
    except OSError:
        return [path]
    if resolved.parent.name == ".vot" and resolved.name in ("presets", "environments"):
        return sorted(full.glob("*.yaml")) or [path]
    if resolved.name == ".vot":
        return sorted([*full.glob("environments/*.yaml"), *full.glob("presets/*.yaml")]) or [path]
    if resolved.name == "missions" and resolved.parent == Path(root).resolve():
        return sorted(p.parent for p in full.glob("*/mission.yaml")) or [path]
    return [path]


def validate_path(root: Path, path: Path) -> str:
    """Check one file and return a one-line summary; any problem is a UserError."""
    path = Path(path)
    try:
        here = path.exists()
    except OSError as exc:  # a name the OS refuses (too long, ...)
        raise UserError(f"cannot be read: {exc.strerror or exc}", file=path,
                        fix="give the path of a preset, an environment or a mission folder") from None
    if not path.is_absolute() and not here:
        path = Path(root) / path  # relative to the current folder first, else to the project
    folder = path.parent
    if folder.parent.name == ".vot" and folder.name == "presets":
        return f"preset {load_preset_file(path).name}: ok"
    if folder.parent.name == ".vot" and folder.name == "environments":
        return f"environment {load_environment_file(path).name}: ok"
    mission = _mission_name(root, path)
    if mission is not None:
        load_mission(root, mission)
        return f"mission {mission}: ok"
    raise UserError(
        "cannot tell what kind of file this is",
        file=path,
        fix="validate " + ", ".join(KINDS[:-1]) + " or " + KINDS[-1],
    )
