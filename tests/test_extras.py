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
    assert "-e '.[dev,azure,plots]'" in (repo / "Makefile").read_text()
    import tomllib

    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "azure" not in core and "matplotlib" not in core
    assert {"azure", "plots"} <= set(project["optional-dependencies"])
