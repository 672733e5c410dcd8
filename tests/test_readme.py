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


def test_render_at_head_writes_the_committed_page_byte_for_byte(tmp_path: Path):
    """Issue 47, item 4: `render` on what git tracks (the checkout's tracked records, rulings,
    presets and hand-kept files, never an untracked run folder) leaves the committed results page
    as it is, so the slash command's `git diff` after `render` is its own run's only. The real CLI,
    on a copy; the page it writes is compared byte for byte with the page in the checkout."""
    import os
    import shutil
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "-z", "--", ".llms-benchmark", "rulings", ".vot", "missions"],
                             cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    root = tmp_path / "head"
    for rel in filter(None, tracked):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    page = root / ".llms-benchmark" / "README.md"
    cli = REPO / ".venv" / "bin" / "llms-benchmark"
    done = subprocess.run([str(cli), "render", "--json"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LLMS_BENCHMARK_ROOT": str(root)})
    assert done.returncode == 0, done.stdout + done.stderr
    committed = (REPO / ".llms-benchmark" / "README.md").read_bytes()
    assert page.read_bytes() == committed, ("`llms-benchmark render` changes the committed results page: "
                                            "render it and commit the page with the change that moved it")
    assert '"changed": false' in done.stdout


def test_a_legend_is_only_for_a_column_the_page_shows():
    """The cause of the one-line drift: the 'Agents sustained' legend was written under a table
    that only shows that column when a row has a capacity sweep."""
    from harness.results.render import render_results

    text = render_results(REPO)
    assert ("Agents sustained: from `launch --capacity`" in text) == ("| Agents sustained |" in text)


def test_every_command_that_prints_a_result_takes_json():
    """The README says so, naming the two exceptions; the CLI is checked against the sentence."""
    import typer.main

    from harness.cli import app

    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "Every command that prints a result also takes `--json` (`fitness smoke` takes its own `--json`" in text
    without = sorted(usage.split()[0] + (" " + usage.split()[1] if usage.startswith("fitness") else "")
                     for usage, options, _ in docs._commands(typer.main.get_command(app), [])
                     if "--json" not in options)
    assert without == ["fitness serve", "fitness smoke"], without
    assert 'p.add_argument("--json"' in (REPO / "harness" / "fitness" / "smoke.py").read_text()
