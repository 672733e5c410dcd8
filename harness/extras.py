"""Optional dependencies (pyproject's extras): what each one brings, and the one clear error
when a command needs one that is not installed. `make setup` installs them all; the core
(`pip install -e .`) is what a launch needs.

    azure          the azure stack's SDKs (Container Apps over ARM, DefaultAzureCredential)
    plots          matplotlib: the load benchmark's and `fitness history`'s PNG plots
    observability  the observability mission's system under test (FastAPI, MCP, the OpenTelemetry
                   SDK and exporter): its own pins in missions/observability/requirements.txt,
                   checked at a launch's preflight (`require_mission`)
    api            FastAPI + uvicorn: `llms-benchmark fitness serve`
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from harness.errors import PreflightError

# extra -> the top-level modules it provides (the first extra naming a module answers `extra_of`)
EXTRAS: dict[str, tuple[str, ...]] = {"azure": ("azure",), "plots": ("matplotlib",),
                                      "api": ("fastapi", "uvicorn", "starlette"),
                                      "observability": ("fastapi", "uvicorn", "mcp", "opentelemetry.sdk",
                                                        "opentelemetry.exporter", "opentelemetry.instrumentation")}

MISSION_REQUIREMENTS = "requirements.txt"  # a mission's own dependency file, beside mission.yaml
_EXTRA_LINE = re.compile(r"^#\s*extra:\s*([A-Za-z0-9_-]+)\s*$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def extra_of(exc: ImportError, among: tuple[str, ...] | None = None) -> str | None:
    """The extra whose module is missing in `exc`, or None (another import failed: a bug).
    `among`: only these extras (a command that knows which one it needs)."""
    name = exc.name or ""
    for extra, modules in EXTRAS.items():
        if among is not None and extra not in among:
            continue
        if any(name == m or name.startswith(m + ".") or m.startswith(name + ".") for m in modules):
            return extra
    return None


def missing(extra: str, what: str, exc: ImportError | None = None, *, detail: str | None = None) -> PreflightError:
    gone = detail or (f"{exc.name} is missing" if exc is not None else "it is missing")
    return PreflightError(f"{what} needs the `{extra}` extra, which is not installed ({gone})",
                          field=extra, fix=f"pip install -e '.[{extra}]' in the harness's venv (`make setup` "
                                           "installs every extra)")


def mission_requirements(mission_dir: Path) -> tuple[str | None, list[tuple[str, str]]]:
    """(the extra named by `# extra: NAME`, [(distribution, pinned version)]) of a mission's
    requirements.txt; (None, []) when the mission has none (it runs with the core alone)."""
    path = Path(mission_dir) / MISSION_REQUIREMENTS
    if not path.is_file():
        return None, []
    extra, pins = None, []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if m := _EXTRA_LINE.match(line):
            extra = m.group(1)
        elif line and not line.startswith("#"):
            pin = _PIN.match(line)
            if pin is None:
                raise PreflightError(f"'{line}' is not a pinned requirement", file=path, field=MISSION_REQUIREMENTS,
                                     fix="write each requirement as NAME==VERSION")
            pins.append((pin.group(1), pin.group(2)))
    return extra, pins


def require_mission(mission_name: str, mission_dir: Path) -> None:
    """Refuse, before anything is served, a mission whose system under test is not installed in
    the harness's environment (a distribution missing or at another version than pinned)."""
    extra, pins = mission_requirements(mission_dir)
    wrong = []
    for dist, want in pins:
        try:
            have = metadata.version(dist)
        except metadata.PackageNotFoundError:
            wrong.append(f"{dist} is not installed")
            continue
        if have != want:
            wrong.append(f"{dist} is {have}, pinned {want}")
    if not wrong:
        return
    what = f"the '{mission_name}' mission's system under test"
    if extra:
        raise missing(extra, what, detail="; ".join(wrong))
    path = Path(mission_dir) / MISSION_REQUIREMENTS
    raise PreflightError(f"{what} is not installed ({'; '.join(wrong)})", file=path, field=MISSION_REQUIREMENTS,
                         fix=f"pip install -r {path} in the harness's venv")
