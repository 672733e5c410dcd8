"""Issue 35, item 4: the README's reference tables are generated — the command list from the
CLI, the environments and presets from `.vot/`, the exit codes from one table in the code —
and this test fails when one drifts (fix: `.venv/bin/python -m harness.cli.docs --write`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.cli import docs

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_tables_match_the_cli_and_the_files():
    found = docs.drift((REPO / "README.md").read_text(encoding="utf-8"))
    assert not found, (f"README.md's {', '.join(found)} table(s) drifted from the CLI and .vot/: "
                       "run `.venv/bin/python -m harness.cli.docs --write`")


def test_every_environment_and_preset_file_is_listed():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for folder in ("environments", "presets"):
        for path in (REPO / ".vot" / folder).glob("*.yaml"):
            assert f"| `{path.stem}` |" in text, f"{path} is not in the README's table"
    for path in (REPO / ".vot" / "environments").glob("*.yaml"):
        assert docs._leading_comment(path), f"{path}: open it with a comment line, its note in the README"
        assert yaml.safe_load(path.read_text())["name"] == path.stem


def test_the_check_fails_on_drift(tmp_path: Path):
    """The check can fail: a verb renamed, a preset added, a row of the exit codes edited by hand."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert docs.drift(text) == {}
    assert set(docs.drift(text.replace("| `wait RUN` |", "| `await RUN` |"))) == {"commands"}
    assert set(docs.drift(text.replace("| 124 | still running", "| 5 | still running"))) == {"exit-codes"}
    cut = text.replace("<!-- generated:presets:end -->", "")
    assert docs.drift(cut)["presets"][0] is None  # a marker gone is drift too
    root = tmp_path / "root"
    (root / ".vot" / "presets").mkdir(parents=True)
    (root / ".vot" / "presets" / "new.yaml").write_text("name: new\nmodel: m\ndescription: a new one\n")
    assert "| `new` | `m` | a new one |" in docs.presets_table(root)


def test_obs_is_not_listed_as_a_verb():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "| `obs" not in text  # a separate console script, said so in prose
    assert "`obs` is a separate console script" in text


def test_the_cli_module_has_one_exit_code_table():
    from harness.cli.common import EXIT_CODES

    assert [row[0] for row in EXIT_CODES] == ["0", "1", "2", "3", "124", "128+N"]
    from harness.cli.wait import STILL_RUNNING
    from harness.fitness.cli import PIPELINE_ERROR

    assert STILL_RUNNING == 124 and PIPELINE_ERROR == 3
