"""Issue 35, item 6 (in part): the Azure SDKs and matplotlib are extras (`azure`, `plots`) that
`make setup` installs; without one, the command that needs it says which extra to install
(exit 2, no traceback) and nothing else is affected."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import Project

BLOCK = "raise ModuleNotFoundError(\"No module named '{0}' (blocked by the test)\", name='{0}')\n"


def _block(project: Project, module: str) -> None:
    """`module` cannot be imported by the CLI the test runs (a package first on its PYTHONPATH that refuses)."""
    folder = project.root.parent / "blocked" / module
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(BLOCK.format(module))
    project.env["PYTHONPATH"] = str(folder.parent)


def test_an_azure_environment_without_the_azure_extra_is_refused_by_name(project: Project):
    project.add_environment("azure-sweden")
    _block(project, "azure")
    code, out, err = project.run_cli(["preflight", "azure-sweden", "replay-hello"], timeout=60)
    flat = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, err
    assert "the azure stack needs the `azure` extra" in flat and "pip install -e '.[azure]'" in flat, err
    # Every other stack is untouched.
    code, out, err = project.run_cli(["preflight", "replay", "replay-hello", "--mission", "hello"], timeout=60)
    assert code == 0, err


def test_without_matplotlib_the_trend_plot_names_the_plots_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from harness.errors import PreflightError
    from harness.extras import extra_of
    from harness.fitness import trend

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(PreflightError) as caught:
        trend.draw([{"metrics": {"x": 1.0}}], "m", tmp_path / "m.png")
    assert "`plots` extra" in caught.value.message and "'.[plots]'" in caught.value.fix
    assert extra_of(ModuleNotFoundError("x", name="azure.identity")) == "azure"
    assert extra_of(ModuleNotFoundError("x", name="numpy")) is None  # a core package missing is a bug, raised


def test_the_extras_are_installed_by_make_setup():
    repo = Path(__file__).resolve().parents[1]
    assert "-e '.[dev,azure,plots,observability,api]'" in (repo / "Makefile").read_text()
    import tomllib

    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for name in ("azure", "matplotlib", "fastapi", "uvicorn", "mcp", "opentelemetry-sdk", "opentelemetry-api",
                 "opentelemetry-exporter"):
        assert name not in core, name
    assert {"azure", "plots", "observability", "api"} <= set(project["optional-dependencies"])


def test_the_observability_extra_is_the_missions_own_requirements():
    """The mission's dependency file and the extra `make setup` installs hold the same pins."""
    import tomllib

    from harness.extras import mission_requirements

    repo = Path(__file__).resolve().parents[1]
    extra, pins = mission_requirements(repo / "missions" / "observability")
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    assert extra == "observability"
    assert sorted(f"{d}=={v}" for d, v in pins) == sorted(project["optional-dependencies"]["observability"])
    assert mission_requirements(repo / "missions" / "hello") == (None, [])  # the core alone runs it


def test_a_mission_whose_system_under_test_is_missing_is_refused_at_preflight(project: Project):
    """Before anything is served: exit 2, the extra named, what is missing said (hello made to need one)."""
    (project.root / "missions" / "hello" / "requirements.txt").write_text(
        "# extra: observability\nnot-a-distribution-anywhere==1.0\npydantic==0.0.1\n")
    code, out, err = project.run_cli(["preflight", "replay", "replay-hello", "--mission", "hello"], timeout=60)
    flat = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, err
    assert "the 'hello' mission's system under test needs the `observability` extra" in flat, err
    assert "not-a-distribution-anywhere is not installed" in flat and "pydantic is 2." in flat, err
    assert "pip install -e '.[observability]'" in flat, err
    (project.root / "missions" / "hello" / "requirements.txt").write_text("fastapi>=1\n")  # not pinned
    code, out, err = project.run_cli(["preflight", "replay", "replay-hello", "--mission", "hello"], timeout=60)
    assert code == 2 and "'fastapi>=1' is not a pinned requirement" in " ".join(err.split()), err


def test_fitness_serve_without_fastapi_names_the_api_extra(project: Project):
    _block(project, "fastapi")
    code, out, err = project.run_cli(["fitness", "serve", "--port", "0"], timeout=60)
    flat = " ".join(err.split())
    assert code == 3 and "Traceback" not in err, err
    assert "`fitness serve` (the HTTP API) needs the `api` extra" in flat and "'.[api]'" in flat, err


# The extras' top-level modules: the core must import and run without any of them.
EXTRA_MODULES = ("azure", "matplotlib", "fastapi", "uvicorn", "starlette", "mcp", "opentelemetry.sdk",
                 "opentelemetry.exporter", "opentelemetry.instrumentation")
BLOCKER = f"""
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in {EXTRA_MODULES!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}} (an extra, blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""


def test_the_core_alone_runs_the_cli_and_imports_the_launch(tmp_path: Path):
    """What `pip install -e .` (no extra) gives: `--help` and every module a launch imports (the
    stages, the replay and local stacks, the telemetry store), with every extra's module blocked."""
    import subprocess

    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    script = ("import sys, pkgutil, importlib, harness\n"
              "failed = {}\n"
              "for m in pkgutil.walk_packages(harness.__path__, 'harness.'):\n"
              "    if m.name.endswith('__main__'):\n        continue\n"
              "    try:\n        importlib.import_module(m.name)\n"
              "    except ImportError as exc:\n        failed[m.name] = exc.name\n"
              "print(sorted(failed.items()))\n"
              "from harness.cli import main\nsys.argv = ['llms-benchmark', '--help']\nmain()\n")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, cwd=repo,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path),
                               "COLUMNS": "200"})
    assert done.returncode == 0 and "Usage: llms-benchmark" in done.stdout, done.stderr[-2000:]
    failed = dict(eval(done.stdout.splitlines()[0]))  # noqa: S307 - our own repr of a list of pairs
    # only the modules that ARE the extras' features fail to import; each is reached lazily
    assert failed == {"harness.fitness.api": "fastapi", "harness.load.plots": "matplotlib",
                      "harness.stacks.azure": "azure", "harness.stacks.azure_arm": "azure",
                      "harness.stacks.azure_logs": "azure"}, failed


def test_the_missions_own_setup_refuses_before_starting_anything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Controls and `mission check` start the shop stack without a preflight: its setup checks the extra first."""
    import importlib.util
    from importlib import metadata

    from harness import extras
    from harness.errors import PreflightError

    real = metadata.version

    def version(dist: str) -> str:
        if dist == "mcp":
            raise metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(extras.metadata, "version", version)
    setup = Path(__file__).resolve().parents[1] / "missions" / "observability" / "infra" / "setup.py"
    spec = importlib.util.spec_from_file_location("obs_setup_under_test", setup)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    started = []
    monkeypatch.setattr(module, "start_store", lambda *a, **k: started.append(a))
    with pytest.raises(PreflightError) as caught:
        module.start(tmp_path / "ws", tmp_path / "run")
    assert "needs the `observability` extra" in caught.value.message and "mcp is not installed" in caught.value.message
    assert started == []
