"""Issue 63: docs that cannot drift from the code. The site builds strictly (mkdocs, broken links
and anchors fail it); every repository path the README and the docs name exists; every
`llms-benchmark` command they show names a real command and real flags; every figure a sentence
quotes beside a committed result (`bench/results/...`) is in that result, as rounded. Each check
is also run on text built to defeat it, so it can fail."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# --- the site ------------------------------------------------------------------------------------


def test_the_site_builds_strictly(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "presets" / "index.html").is_file()


def test_every_docs_page_is_in_the_site_nav():
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = {next(iter(item.values())) for item in nav}
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}


def test_a_broken_link_fails_the_strict_build(tmp_path: Path):
    site = tmp_path / "copy"
    (site / "docs").mkdir(parents=True)
    (site / "mkdocs.yml").write_text((REPO / "mkdocs.yml").read_text().split("nav:")[0])
    (site / "docs" / "index.md").write_text("# x\n\n[gone](nowhere.md)\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "out")],
                          cwd=site, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "nowhere.md" in done.stdout + done.stderr


# --- repository paths ----------------------------------------------------------------------------

TOP = ("harness/", "tests/", "bench/", "missions/", ".vot/", "docs/", "replay/", ".claude/", ".ci/",
       "workspace/")
RUNTIME = (".vot/run/",)  # made by a launch (the ledger, the units' logs): never in the repository
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def named_paths(text: str) -> set[str]:
    """The repository paths a page names: code spans and links that start at a top-level folder
    (or are one of the root's files), less templates (`<run_id>`, `*`, `{...}`), a test id's
    `::name` and a line number's `:269`."""
    found = set()
    for raw in [*SPAN.findall(text), *LINK.findall(text)]:
        for word in raw.split():
            word = word.strip(",;()'\"").split("::")[0]
            word = re.sub(r":\d+(-\d+)?$", "", word)
            if any(c in word for c in "<>*{}$") or "://" in word or word.startswith(RUNTIME):
                continue
            if word.startswith(TOP) or word in ("Makefile", "pyproject.toml", "mkdocs.yml", "package.json"):
                found.add(word)
    return found


def missing_paths(page: Path, text: str) -> list[str]:
    gone = []
    for name in sorted(named_paths(text)):
        base = REPO if not name.startswith(("../", "./")) else page.parent
        target = (base / name).resolve()
        if name.startswith("workspace/"):  # the observability mission's system under test
            target = REPO / "missions" / "observability" / name
        if not target.exists():
            gone.append(name)
    return gone


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page: Path):
    assert missing_paths(page, page.read_text(encoding="utf-8")) == []


def test_the_path_check_finds_a_moved_file():
    """Issue 63 found `run/launch.py` and `harness/trajectory/atif_in.py` named after they moved."""
    text = "see `harness/trajectory/atif_in.py` and [the record](harness/run/record.py), `harness/cli/docs.py`"
    assert missing_paths(REPO / "README.md", text) == ["harness/run/record.py", "harness/trajectory/atif_in.py"]


# --- commands ------------------------------------------------------------------------------------

COMMAND = re.compile(r"(?:^|[\s`$(])(?:\.venv/bin/)?llms-benchmark\s+([^`\n|]+)")


def shown_commands(text: str) -> list[str]:
    """Each `llms-benchmark ...` command line a page shows (in a fence or a code span), up to a
    comment, a pipe or a shell operator."""
    lines = []
    for fence in re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S):
        lines += [ln for ln in fence.replace("\\\n", " ").splitlines()]
    lines += SPAN.findall(text)
    shown = []
    for line in lines:
        for m in COMMAND.finditer(line):
            shown.append(re.split(r"\s(?:#|&&|\|\||;|>)", m.group(1))[0].strip())
    return shown


def command_problem(line: str) -> str | None:
    """Why `llms-benchmark <line>` would not parse: an unknown command, an unknown flag, too many
    arguments. Placeholders (`<run_id>`, `...`) stand for any value."""
    from harness.cli import app

    try:
        words = [w for w in shlex.split(line.replace("[", " ").replace("]", " ")) if w]  # a synopsis' [--opt X]
    except ValueError as exc:
        return f"unbalanced quotes ({exc})"
    command = get_command(app)  # typer's own click: groups are told by their `commands`
    path = []
    while hasattr(command, "commands") and words and not words[0].startswith("-"):
        if words[0] not in command.commands:
            return f"no command {' '.join([*path, words[0]])!r}"
        path.append(words[0])
        command = command.commands[words.pop(0)]
    if hasattr(command, "commands"):
        return None if not words or words[0] == "--help" else f"{' '.join(path)} needs a subcommand"
    flags = {opt: p for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    positional = [p for p in command.params if p.param_type_name == "argument"]
    room = float("inf") if any(p.nargs == -1 for p in positional) else len(positional)
    if command.context_settings.get("allow_extra_args"):
        room = float("inf")
    args, skip = 0, False
    for word in words:
        if skip:
            skip = False
            continue
        if word.startswith("--") or (word.startswith("-") and len(word) == 2 and not word[1].isdigit()):
            name = word.split("=", 1)[0]
            if name not in flags:
                return f"{' '.join(path)}: no option {name}"
            skip = "=" not in word and not flags[name].is_flag and not getattr(flags[name], "count", False)
            continue
        if word in ("...", "…"):
            continue
        args += 1
    if args > room:
        return f"{' '.join(path)}: {args} arguments, it takes {room}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_a_page_shows_parses(page: Path):
    text = page.read_text(encoding="utf-8")
    problems = {line: why for line in shown_commands(text) if (why := command_problem(line))}
    assert problems == {}


def test_the_command_check_finds_a_wrong_flag_and_a_wrong_verb():
    assert command_problem("launch local cpu cpu-qwen2-5-coder-1-5b --mission hello") is None
    assert command_problem("rule <run_id> set 3 --verdict 'held up' --reason 'x'") is None
    assert "no option --detatch" in command_problem("launch local cpu p --detatch")
    assert "no command 'matrix odd'" not in (command_problem("matrix odd") or "")  # PLAN is an argument
    assert "no command 'lanch'" in command_problem("lanch local cpu p")
    assert "arguments" in command_problem("wait a b c")
    text = "```sh\n.venv/bin/llms-benchmark wait <run_id> --timeout 100  # again\n```\nthen `llms-benchmark render --json`"
    assert shown_commands(text) == ["wait <run_id> --timeout 100", "render --json"]


# --- figures -------------------------------------------------------------------------------------

RESULT = re.compile(r"bench/results/[\w.\-/]+\.(?:md|json)")
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(s|ms|min|tok/s|%|MiB|GiB|GB|MB|×)(?![\w])")
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.;:)])\s+(?=[A-Z(`*])", re.sub(r"\s+", " ", text))


def unmatched_figures(text: str) -> list[str]:
    """Figures (a number with a unit) in a sentence that names a committed result, which that
    result does not hold (as written there, or rounded to the figure's decimals)."""
    wrong = []
    for sentence in sentences(text):
        names = set(RESULT.findall(sentence))
        if not names:
            continue
        body = " ".join((REPO / n).read_text(encoding="utf-8") for n in names if (REPO / n).is_file())
        numbers = [float(n.replace(",", "")) for n in NUMBER.findall(body)]
        for m in FIGURE.finditer(sentence):
            fig = m.group(1).replace(",", "")
            half = 0.5 * 10 ** -(len(fig.split(".")[1]) if "." in fig else 0)
            if not any(abs(n - float(fig)) <= half + 1e-9 for n in numbers):
                wrong.append(f"{m.group(0)} (not in {', '.join(sorted(names))})")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_quoted_from_a_result_is_in_it(page: Path):
    assert unmatched_figures(page.read_text(encoding="utf-8")) == []


def test_the_figure_check_finds_a_stale_timing():
    """Issue 63: a rule timing quoted as 4.4 s where its committed result said otherwise."""
    ok = "A 30-finding report is ruled in 4.15 s (`bench/results/rule-timing-120x5.md`)."
    stale = "A 30-finding report is ruled in 4.4 s (`bench/results/rule-timing-120x5.md`)."
    assert unmatched_figures(ok) == []
    assert unmatched_figures(stale) == ["4.4 s (not in bench/results/rule-timing-120x5.md)"]
    assert unmatched_figures("Ruled in 4.4 s, measured by hand.") == []  # no result named: not a quote
