"""The docs' reference tables, generated: the command list from the CLI itself, the
environments and presets from `.vot/`, the exit codes from `harness.cli.common.EXIT_CODES`,
every preset and environment field from the schemas the loader checks them with.

Each table lies in its page (README.md, docs/presets.md) between `<!-- generated:NAME:begin -->`
and `<!-- generated:NAME:end -->`; everything else is prose. `python -m harness.cli.docs --write`
rewrites the tables, `--check` (and tests/test_readme.py, in `make test`) fails when one drifts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer
import typer.main
import yaml

from harness.cli.common import EXIT_CODES
from harness.markdown_table import table

REPO = Path(__file__).resolve().parents[2]
MAX_OPTIONS = 10  # a command with more lists these and points to its --help


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    match = re.match(r"(.+?\.)(\s|$)", text)
    return match.group(1) if match else text


def _usage(command, path: list[str]) -> tuple[str, list[str]]:
    args, options = [], []
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.name or "").upper()
            name = f"{name}..." if param.nargs == -1 else name
            args.append(name if param.required else f"[{name}]")
        elif not getattr(param, "hidden", False) and param.opts and param.opts[0] != "--help":
            options.append(param.opts[0])
    return " ".join([*path, *args]), options


def _commands(group, path: list[str]) -> list[tuple[str, list[str], str]]:
    rows = []
    for name in group.list_commands(None):  # the order of `--help`
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        if getattr(command, "commands", None):
            rows += _commands(command, [*path, name])
            continue
        usage, options = _usage(command, [*path, name])
        rows.append((usage, options, _first_sentence(command.help or command.short_help)))
    return rows


def commands_table() -> str:
    from harness.cli import app

    rows = []
    for usage, options, help_text in _commands(typer.main.get_command(app), []):
        shown = ", ".join(f"`{o}`" for o in options[:MAX_OPTIONS])
        if len(options) > MAX_OPTIONS:
            shown += f", +{len(options) - MAX_OPTIONS} more (`--help`)"
        rows.append([f"`{usage}`", help_text, shown or "—"])
    return table(["command", "what it does", "options"], rows)


def _leading_comment(path: Path) -> str:
    """The comment lines that open a file: an environment's note (its schema allows no description)."""
    note = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        note.append(line.lstrip("#").strip())
    return " ".join(note)


def environments_table(root: Path = REPO) -> str:
    rows = []
    for path in sorted((root / ".vot" / "environments").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        port = (data.get("config") or {}).get("port")
        rows.append([f"`{path.stem}`", f"`{data.get('stack', '?')}`",
                     "any free" if port == 0 else port if port is not None else "the stack default",
                     _leading_comment(path).strip() or "—"])
    return table(["environment", "stack", "port", "notes"], rows)


def presets_table(root: Path = REPO) -> str:
    rows = []
    for path in sorted((root / ".vot" / "presets").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        rows.append([f"`{path.stem}`", f"`{data.get('model', '?')}`", data.get("description", "—")])
    return table(["preset", "model", "description"], rows)


def exit_codes_table() -> str:
    return table(["exit", "means", "commands"], EXIT_CODES)


def _cell(text: str) -> str:
    return " ".join(str(text).split())


def _type_of(node: dict, defs: dict) -> tuple[str, str]:
    """(type as a reader writes it, its description), a `$ref` followed into `$defs`."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        kind, text = _type_of(target, defs)
        return kind, node.get("description") or text
    if "enum" in node:
        kind = ", ".join(f"`{v}`" for v in node["enum"])
    elif isinstance(node.get("type"), list):
        kind = " or ".join(node["type"])
    else:
        kind = node.get("type", "any")
    if kind == "array" and "items" in node:
        kind = f"list of {_type_of(node['items'], defs)[0]}"
    bounds = [f"{word} {node[key]}" for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
              if key in node]
    if bounds:
        kind += f" ({', '.join(bounds)})"
    return kind, node.get("description", "")


def _fields(schema: dict, defs: dict, prefix: str = "") -> list[list[str]]:
    rows = []
    required = set(schema.get("required", []))
    for name, node in schema.get("properties", {}).items():
        kind, text = _type_of(node, defs)
        rows.append([f"`{prefix}{name}`", kind, "yes" if name in required else "—", _cell(text) or "—"])
    return rows


def preset_fields_table() -> str:
    from harness.vot.loader import load_schema

    schema = load_schema("preset")
    defs = schema.get("$defs", {})
    return table(["field", "type", "required", "what it is"], _fields(schema, defs)
                 + _fields(defs["override"], defs, prefix="stacks.<stack>."))


def environment_fields_table() -> str:
    from harness.vot.loader import load_schema

    schema = load_schema("environment")
    rows = [row for row in _fields(schema, {}) if row[0] != "`config`"]
    return table(["field", "type", "required", "what it is"], rows)


def stack_config_table() -> str:
    from harness.stack_specs.catalog import SPECS

    rows = []
    for spec in SPECS:
        for name, node in (spec.config.get("properties") or {}).items():
            kind, text = _type_of(node, {})
            rows.append([f"`{spec.name}`", f"`config.{name}`", kind, _cell(text) or "—"])
    return table(["stack", "field", "type", "what it is"], rows)


# page → the tables it holds
PAGES = {
    "README.md": {"commands": commands_table, "environments": environments_table, "presets": presets_table,
                  "exit-codes": exit_codes_table},
    "docs/presets.md": {"preset-fields": preset_fields_table, "environment-fields": environment_fields_table,
                        "stack-config": stack_config_table},
}
TABLES = PAGES["README.md"]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated:{name}:begin -->", f"<!-- generated:{name}:end -->"


def drift(text: str, tables: dict | None = None) -> dict[str, tuple[str | None, str]]:
    """{table: (as the page has it (None: no markers), as generated)} for each table that differs."""
    found = {}
    for name, make in (TABLES if tables is None else tables).items():
        begin, end = _markers(name)
        want = make()
        if text.count(begin) != 1 or text.count(end) != 1:
            found[name] = (None, want)
            continue
        have = text[text.index(begin) + len(begin):text.index(end)].strip("\n")
        if have != want:
            found[name] = (have, want)
    return found


def rewrite(text: str, tables: dict | None = None, page: str = "README.md") -> str:
    for name, make in (TABLES if tables is None else tables).items():
        begin, end = _markers(name)
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"{page}: put one {begin} and one {end} line where the {name} table goes")
        text = text[:text.index(begin) + len(begin)] + "\n" + make() + "\n" + text[text.index(end):]
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        for page, tables in PAGES.items():
            path = REPO / page
            text = path.read_text(encoding="utf-8")
            new = rewrite(text, tables, page)
            if new != text:
                path.write_text(new, encoding="utf-8")
            print(f"{page}: " + ("rewritten" if new != text else "up to date"))
        return 0
    if argv in ([], ["--check"]):
        drifted = False
        for page, tables in PAGES.items():
            for name in drift((REPO / page).read_text(encoding="utf-8"), tables):
                print(f"{page}: the {name} table drifted from the files and the CLI", file=sys.stderr)
                drifted = True
        if drifted:
            print("  fix: .venv/bin/python -m harness.cli.docs --write", file=sys.stderr)
        return 1 if drifted else 0
    print("usage: python -m harness.cli.docs [--check | --write]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
