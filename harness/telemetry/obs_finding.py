"""`obs finding add|list|check|report`: the agent's findings as structured records.

Each finding is one record of `findings.json` in the workspace, checked against SCHEMA when
written: the claim (what is wrong, what it causes), and as closed fields from the mission's
vocabulary (OBS_CLAIMS, the mission's claims.yaml) its kind, the direction the measured thing lies
from a healthy system's (higher, lower, absent, present) and its scope (a service, optionally
SERVICE:TARGET); the queries cited with what each read; and the accused code (file, and function
or line, or module level). Those fields, never the claim's words, are what a finding is credited on. `check` re-runs every
cited query on the store and looks the code up in the workspace, so a mistake is fixed before
the report is final; `report` renders report.md from the records.

    obs finding add --claim TEXT --kind KIND --direction higher|lower|absent|present --scope SERVICE[:TARGET]
                    --query SQL_OR_OBS --read N --file src/x.py [--function NAME]
                    [--line N] [--module-level] [--severity low|medium|high] [--impact TEXT] [--gap]
    obs finding list [--json]
    obs finding check
    obs finding report            (writes report.md from findings.json)
    obs finding remove NUMBER
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
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
    return data, schema_problems(data, _vocabulary())


def _vocabulary():
    from harness.telemetry.claims import vocabulary_from_env

    return vocabulary_from_env()


def _save(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_value(text: str) -> float | str:
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


# The header as missions/observability/prompt.md shows the agent the contract, rule widths and all.
_HEADER = "| # | Finding | Kind | Severity | Evidence |\n|---|---------|------|----------|----------|"


def render(data: dict, window: str = "see scenario/drive.json", vocab=None) -> str:
    """report.md from the records: the contract's front matter, Anomalies table and gap bullets."""
    rows, gaps = [], []
    for f in data.get("findings", []):
        evidence = "; ".join(f"`{one_line(q['query'])}` → {one_line(q['read'])}" for q in f.get("queries", []))
        claim = f["claim"] + (f" ({f['impact']})" if f.get("impact") else "")
        # The closed fields in the one form the report parser reads back without guessing.
        what = f"{claim} — {code_text(f['code'])} [claim: {f['kind']}, {f['direction']}, {f.get('scope', '')}]"
        if f.get("section") == "gaps":
            gaps.append(f"- {f['number']}: {cell(what)} — {cell(evidence)}")
        else:
            category = (vocab.kinds.get(f["kind"]) if vocab else None) or f["kind"]
            rows.append(row([f["number"], what, category, f.get("severity", "medium"), evidence]))
    return ("---\nservices: [shop-api, shop-mcp, shop-agent]\n"
            f"window: {window}\nmode: driven\n---\n\n## Anomalies\n\n"
            + _HEADER + "\n"
            + "\n".join(rows) + "\n\n## Telemetry gaps\n\n" + "\n".join(gaps) + "\n")


# --- the commands ---------------------------------------------------------------------------

def _path() -> Path:
    return Path.cwd() / FINDINGS_FILE


def _query_problems(client, query: str, read: Any, direction: str | None, parse_query) -> list[str]:
    """Run a cited query as the ruler will (SQL, or an `obs` command) and compare what it reads.
    `parse_query(argv)`: `obs`'s own reading of a command line, None for one that is not a query
    (passed in by `obs`, which this module sits under)."""
    from harness.telemetry.obs_store import QueryFailed, StoreDown

    query = query.strip()
    from harness.telemetry.sqlread import strip_leading_comments

    try:
        if query.startswith("obs "):
            import shlex

            args = parse_query(shlex.split(query)[1:])
            if args is None:
                return [f"`{query[:60]}` is not a query of the telemetry"]
            out = args.func(client, args)
            got: list[float] = [float(out.rows)]
        elif re.match(r"^\s*\(?\s*(select|with|from)\b", strip_leading_comments(query), re.IGNORECASE):
            res = client.sql(query, limit=1000)
            if not res.rows:
                got = [0.0]
            elif len(res.rows) == 1:
                got = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0 if v is None
                       else float("nan") for v in res.rows[0]] + [1.0]
            else:
                got = [float(len(res.rows))]
        else:
            return [f"`{query[:60]}` is neither SQL (SELECT/WITH) nor an `obs` command"]
    except SystemExit:
        return [f"`{query[:60]}`: obs does not accept these arguments"]
    except (QueryFailed, StoreDown) as exc:
        return [f"`{query[:60]}` fails: {str(exc).splitlines()[0][:200]}"]
    if isinstance(read, str):
        m = re.search(r"[-+]?\d+(?:\.\d+)?", read)
        read = float(m.group(0)) if m else None
    if read is None:
        return [f"`{query[:60]}`: say what it read as a number (--read N; a row count for many rows)"]
    if not any(abs(g - float(read)) <= max(2.0, 0.5 * abs(float(read))) for g in got if g == g):
        shown = ", ".join(f"{g:g}" for g in got[:4] if g == g)
        return [f"`{query[:60]}` reads {shown} now, not the {float(read):g} recorded"]
    # The direction is the claim's (where the thing lies against a healthy system), not this
    # query's: a count of spans *without* a child reads high where the child is absent.
    return []


def check_all(data: dict, root: Path, client, parse_query) -> list[str]:
    problems = []
    for f in data.get("findings", []):
        if not isinstance(f, dict):
            continue
        number = f.get("number", "?")
        if isinstance(f.get("code"), dict):
            problems += [f"finding {number}: {p}" for p in code_problems(f["code"], root)]
        for q in f.get("queries") or []:
            if isinstance(q, dict) and isinstance(q.get("query"), str):
                problems += [f"finding {number}: {p}"
                             for p in _query_problems(client, q["query"], q.get("read"), f.get("direction"), parse_query)]
    return problems


def finding_cmd(client, a: argparse.Namespace):
    from harness.telemetry.obs_store import Output, QueryFailed

    path = _path()
    data, problems = load(path)
    if a.action == "add":
        if problems:
            raise QueryFailed("findings.json does not validate; fix it first:\n  " + "\n  ".join(problems))
        if len(a.read) != len(a.query):
            raise QueryFailed(f"give one --read per --query ({len(a.query)} queries, {len(a.read)} reads)")
        numbers = {f.get("number") for f in data["findings"] if isinstance(f, dict)}
        prefix = "G" if a.gap else ""
        n = 1
        while f"{prefix}{n}" in numbers:
            n += 1
        code: dict[str, Any] = {"file": a.file}
        if a.function:
            code["function"] = a.function
        if a.line:
            code["line"] = a.line
        if a.module_level:
            code["module_level"] = True
        record: dict[str, Any] = {"number": f"{prefix}{n}", "section": "gaps" if a.gap else "anomalies",
                                  "claim": a.claim, "kind": a.kind, "direction": a.direction, "scope": a.scope,
                                  "queries": [{"query": q, "read": _read_value(r)} for q, r in zip(a.query, a.read)],
                                  "code": code}
        if a.severity:
            record["severity"] = a.severity
        if a.impact:
            record["impact"] = a.impact
        candidate = {"findings": [*data["findings"], record]}
        vocab = _vocabulary()
        if vocab is None:
            raise QueryFailed("not added: this workspace has no claim vocabulary (OBS_CLAIMS is unset), so --kind, "
                              "--direction and --scope cannot be checked; run obs inside the mission's launch")
        bad = schema_problems(candidate, vocab)
        if bad:
            raise QueryFailed("not added:\n  " + "\n  ".join(bad))
        _save(path, candidate)
        lines = [f"finding {record['number']} added to {FINDINGS_FILE}"]
        warn = check_all({"findings": [record]}, Path.cwd(), client, a.parse_query)
        lines += [f"  fix: {w}" for w in warn] or ["  checked: the code exists and every query reads what you recorded"]
        return Output(lines, 1)
    if a.action == "remove":
        kept = [f for f in data["findings"] if not (isinstance(f, dict) and f.get("number") == a.number)]
        if len(kept) == len(data["findings"]):
            raise QueryFailed(f"no finding {a.number} in {FINDINGS_FILE}")
        _save(path, {"findings": kept})
        return Output([f"finding {a.number} removed"], 1)
    if a.action == "list":
        if a.json:
            return Output(json.dumps(data, indent=2).splitlines(), len(data["findings"]))
        lines = [f"{f.get('number')}  [{f.get('kind')}, {f.get('direction')}, {f.get('scope')}]  "
                 f"{str(f.get('claim'))[:100]}  ({code_text(f.get('code') or {})})"
                 for f in data["findings"][:MAX_RECORDS] if isinstance(f, dict)]
        return Output(lines + problems or ["no findings yet: obs finding add ..."], len(lines))
    if a.action == "check":
        problems += check_all(data, Path.cwd(), client, a.parse_query)
        if problems:
            raise QueryFailed(f"{len(problems)} problem(s):\n  " + "\n  ".join(problems))
        return Output([f"{len(data['findings'])} finding(s) check: every file and function exists, every query "
                       f"runs and reads what is recorded"], len(data["findings"]))
    # report
    if problems:
        raise QueryFailed("findings.json does not validate; fix it first:\n  " + "\n  ".join(problems))
    window = "see scenario/drive.json"
    try:
        drive = json.loads((Path.cwd() / "scenario" / "drive.json").read_text())
        if drive.get("start") and drive.get("end"):
            window = f"{drive['start']}/{drive['end']}"
    except (OSError, ValueError, AttributeError):
        pass
    (Path.cwd() / "report.md").write_text(render(data, window, _vocabulary()), encoding="utf-8")
    return Output([f"report.md written from {len(data['findings'])} finding(s)"], len(data["findings"]))


def add_parser(sub, parse_query) -> None:
    """`obs finding ...` beside `obs drive`; `parse_query` reads a cited `obs` command (see
    `_query_problems`)."""
    finding = sub.add_parser("finding", help="record findings as structured records (findings.json)")
    actions = finding.add_subparsers(dest="action", required=True)
    p = actions.add_parser("add", help="add one finding (checked as it is written)")
    p.add_argument("--claim", required=True, help="what is wrong and what it causes")
    p.add_argument("--impact", help="what it causes, if not in the claim")
    vocab = _vocabulary()
    p.add_argument("--kind", required=True, metavar="KIND",
                   help="what kind of defect, from the mission's vocabulary: "
                        + (", ".join(f"{k} ({vocab.means.get(k, '')})" for k in vocab.kinds) if vocab else "see OBS_CLAIMS"))
    p.add_argument("--severity", choices=["low", "medium", "high"])
    p.add_argument("--query", action="append", required=True, help="the SQL or `obs ...` command cited (repeatable)")
    p.add_argument("--read", action="append", required=True, help="what that query read: a number, or a row count")
    p.add_argument("--direction", required=True, choices=DIRECTIONS,
                   help="where the thing the claim is about lies against a healthy system")
    p.add_argument("--scope", required=True, metavar="SERVICE[:TARGET]",
                   help="the service it is about" + (f" ({', '.join(vocab.services)})" if vocab else "")
                        + ", optionally with a route, span, metric or attribute: shop-api:'POST /orders'")
    p.add_argument("--file", required=True, help="the accused file, relative to the workspace (src/...)")
    p.add_argument("--function", help="the accused function")
    p.add_argument("--line", type=int, help="or the accused line")
    p.add_argument("--module-level", action="store_true", help="the defect lives at module level")
    p.add_argument("--gap", action="store_true", help="a telemetry gap rather than an anomaly")
    p.set_defaults(func=finding_cmd, parse_query=parse_query)
    p = actions.add_parser("list", help="the findings recorded")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=finding_cmd, parse_query=parse_query)
    p = actions.add_parser("check", help="re-run every cited query and look the accused code up")
    p.set_defaults(func=finding_cmd, parse_query=parse_query)
    p = actions.add_parser("report", help="write report.md from findings.json")
    p.set_defaults(func=finding_cmd, parse_query=parse_query)
    p = actions.add_parser("remove", help="remove one finding")
    p.add_argument("number")
    p.set_defaults(func=finding_cmd, parse_query=parse_query)
