"""A finding as a structured record (`findings.json` in the workspace): its SCHEMA and closed
claim fields checked field by field (bounded: at most MAX_RECORDS records, the first
SHOWN_PROBLEMS problems spelled out), the accused code looked up in the workspace, and the
records rendered as report.md. `obs finding` (obs_finding.py) writes them; the rule reads them."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

from harness.markdown_table import cell, one_line, row

FINDINGS_FILE = "findings.json"
MAX_RECORDS = 200
TEXT_MAX = 4000
QUERY_MAX = 4000
DIRECTIONS = ["higher", "lower", "absent", "present"]
KINDS = ["Telemetry", "Perf", "Behavior"]  # the results table's categories; a claim's kind maps onto one

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "llms-benchmark observability findings",
    "type": "object",
    "additionalProperties": False,
    "required": ["findings"],
    "properties": {
        "findings": {
            "type": "array", "maxItems": MAX_RECORDS,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["number", "claim", "kind", "queries", "direction", "scope", "code"],
                "properties": {
                    "number": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,11}$"},
                    "section": {"enum": ["anomalies", "gaps"]},
                    "claim": {"type": "string", "minLength": 8, "maxLength": TEXT_MAX},
                    "impact": {"type": "string", "maxLength": TEXT_MAX},
                    "kind": {"type": "string", "maxLength": 40},  # checked against the vocabulary
                    "scope": {"type": "string", "minLength": 1, "maxLength": 200},
                    "severity": {"enum": ["low", "medium", "high"]},
                    "direction": {"enum": DIRECTIONS},
                    "queries": {
                        "type": "array", "minItems": 1, "maxItems": 10,
                        "items": {
                            "type": "object", "additionalProperties": False, "required": ["query", "read"],
                            "properties": {
                                "query": {"type": "string", "minLength": 4, "maxLength": QUERY_MAX},
                                "read": {"type": ["number", "string"]},
                            },
                        },
                    },
                    "code": {
                        "type": "object", "additionalProperties": False, "required": ["file"],
                        "properties": {
                            "file": {"type": "string", "minLength": 4, "maxLength": 300},
                            "function": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,80}$"},
                            "line": {"type": "integer", "minimum": 1},
                            "module_level": {"type": "boolean"},
                        },
                        "anyOf": [{"required": ["function"]}, {"required": ["line"]},
                                  {"required": ["module_level"], "properties": {"module_level": {"const": True}}}],
                    },
                },
            },
        },
    },
}


SHOWN_PROBLEMS = 20  # problems spelled out; the rest are counted, never all built


def _record_problems(validator, item: Any, vocab) -> list[tuple[str, str]]:
    """(field, message) for one record: the schema's first few, then its closed claim fields."""
    from itertools import islice

    from harness.telemetry.claims import record_claim_problems

    out = []
    for err in islice(validator.iter_errors(item), 5):
        field = ".".join(str(p) for p in err.path) or "(record)"
        message = err.message if len(err.message) < 200 else err.message[:197] + "..."
        if err.validator == "anyOf" and field.endswith("code"):
            message = "name the function (--function), a line (--line) or say it is module level (--module-level)"
        out.append((field, message))
    if vocab is not None and isinstance(item, dict):
        bad = {f for f, _ in out}
        for problem in record_claim_problems(item.get("kind"), item.get("direction"), item.get("scope"), vocab):
            field, message = problem.split(": ", 1)
            if field not in bad:
                out.append((field, message))
    return out


def record_problems(data: Any, vocab=None, limit: int = MAX_RECORDS) -> dict[int, list[str]]:
    """Per record index (of the first `limit`), what it misses: schema and, with the mission's
    vocabulary, its kind, direction and scope. One record's problems never touch another's."""
    import jsonschema

    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return {}
    validator = jsonschema.Draft202012Validator(SCHEMA["properties"]["findings"]["items"])
    out: dict[int, list[str]] = {}
    for i, item in enumerate(items[:limit]):
        found = _record_problems(validator, item, vocab)
        if found:
            out[i] = [f"{field}: {message}" for field, message in found]
    return out


def _where(items: list, i: int) -> str:
    number = items[i].get("number") if isinstance(items[i], dict) else None
    return f"finding {number if isinstance(number, str) and len(number) <= 12 else '#' + str(i + 1)}"


def schema_problems(data: Any, vocab=None) -> list[str]:
    """Every way `data` misses the schema (and, with `vocab`, the mission's claim vocabulary), each
    naming the finding and the field, with its fix. Bounded whatever `data` is: records past
    MAX_RECORDS are counted, not validated; past SHOWN_PROBLEMS problems are counted, not built."""
    if not isinstance(data, dict):
        return ["findings.json: (record): the file must be an object {\"findings\": [...]}"]
    out = [f"findings.json: {key}: unknown field; the only field is findings" for key in list(data)[:5]
           if key != "findings"]
    items = data.get("findings")
    if not isinstance(items, list):
        return out + ["findings.json: findings: missing or not a list"]
    if len(items) > MAX_RECORDS:
        out.append(f"findings.json: findings: {len(items):,} records; at most {MAX_RECORDS} are read")
    total = len(out)
    for i, problems in record_problems(data, vocab).items():
        for p in problems:
            total += 1
            if len(out) < SHOWN_PROBLEMS:
                out.append(f"{_where(items, i)}: {p}")
    if total > len(out):
        out.append(f"findings.json: and {total - len(out):,} more problem(s)")
    return out


def load(path: Path) -> tuple[dict, list[str]]:
    """The records and the problems of reading them (never raises)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return {"findings": []}, []
    except OSError as exc:
        return {"findings": []}, [f"{path.name}: cannot be read ({exc.strerror})"]
    if len(raw) > 2_000_000:
        return {"findings": []}, [f"{path.name}: {len(raw):,} bytes, over the 2,000,000 read"]
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {"findings": []}, [f"{path.name}: not JSON ({str(exc).splitlines()[0][:120]}); fix or remove it"]
    return data, schema_problems(data, vocabulary())


def vocabulary():
    from harness.telemetry.claims import vocabulary_from_env

    return vocabulary_from_env()


def save(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_value(text: str) -> float | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


# --- code lookup in the workspace ----------------------------------------------------------

def code_problems(code: dict, root: Path) -> list[str]:
    """Whether the accused file exists under the workspace and defines the function, or has the line."""
    file = str(code.get("file", "")).removeprefix("./")
    path = (root / file).resolve()
    try:
        path.relative_to(root.resolve())
    except ValueError:
        return [f"code.file {file}: not under this workspace; give the path relative to it (src/...)"]
    if not path.is_file() or path.suffix != ".py":
        return [f"code.file {file}: no such Python file here; give the path relative to the workspace (src/...)"]
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return [f"code.file {file}: cannot be read as Python ({type(exc).__name__})"]
    problems = []
    function = code.get("function")
    if function:
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        if function not in names:
            near = sorted(n for n in names if n.lower().startswith(function.lower()[:3]))[:5]
            problems.append(f"code.function {function}: {file} defines no such function"
                            + (f" (it has {', '.join(near)})" if near else ""))
    line = code.get("line")
    if isinstance(line, int) and line > len(text.splitlines()):
        problems.append(f"code.line {line}: {file} has {len(text.splitlines())} lines")
    return problems


def function_at(path: Path, line: int) -> str | None:
    """The innermost function of a Python file that spans `line` (None: module level)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best.name if best else None


# --- rendering ------------------------------------------------------------------------------

def code_text(code: dict) -> str:
    file = code.get("file", "")
    parts = [file]
    if code.get("function"):
        parts.append(code["function"])
    if code.get("line"):
        parts.append(f"line {code['line']}")
    if code.get("module_level"):
        parts.append("(module level)")
    return " ".join(parts)


# The header as missions/observability/prompt.md shows the agent the contract, rule widths and all:
# the claim in visible columns, read back by the report parser without guessing (issue 59).
_HEADER = ("| # | Finding | Kind | Direction | Scope | Code | Severity | Evidence |\n"
           "|---|---------|------|-----------|-------|------|----------|----------|")


def render(data: dict, window: str = "see scenario/drive.json", vocab=None) -> str:
    """report.md from the records: the contract's front matter, Anomalies table and gap bullets."""
    rows, gaps = [], []
    for f in data.get("findings", []):
        evidence = "; ".join(f"`{one_line(q['query'])}` → {one_line(q['read'])}" for q in f.get("queries", []))
        claim = f["claim"] + (f" ({f['impact']})" if f.get("impact") else "")
        if f.get("section") == "gaps":
            # A bullet has no columns: the closed fields in the one form the parser reads back.
            what = f"{claim} — {code_text(f['code'])} [claim: {f['kind']}, {f['direction']}, {f.get('scope', '')}]"
            gaps.append(f"- {f['number']}: {cell(what)} — {cell(evidence)}")
        else:
            rows.append(row([f["number"], claim, f["kind"], f["direction"], f.get("scope", ""), code_text(f["code"]),
                             f.get("severity", "medium"), evidence]))
    return ("---\nservices: [shop-api, shop-mcp, shop-agent]\n"
            f"window: {window}\nmode: driven\n---\n\n## Anomalies\n\n"
            + _HEADER + "\n"
            + "\n".join(rows) + "\n\n## Telemetry gaps\n\n" + "\n".join(gaps) + "\n")
