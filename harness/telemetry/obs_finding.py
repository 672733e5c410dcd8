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
import json
import re
from pathlib import Path
from typing import Any


from harness.telemetry.claims import TARGET_HELP
from harness.telemetry.finding_record import (
    DIRECTIONS, FINDINGS_FILE, MAX_RECORDS, read_value, save, vocabulary, code_problems, code_text, load, render,
    schema_problems,
)


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
                                  "queries": [{"query": q, "read": read_value(r)} for q, r in zip(a.query, a.read)],
                                  "code": code}
        if a.severity:
            record["severity"] = a.severity
        if a.impact:
            record["impact"] = a.impact
        candidate = {"findings": [*data["findings"], record]}
        vocab = vocabulary()
        if vocab is None:
            raise QueryFailed("not added: this workspace has no claim vocabulary (OBS_CLAIMS is unset), so --kind, "
                              "--direction and --scope cannot be checked; run obs inside the mission's launch")
        bad = schema_problems(candidate, vocab)
        if bad:
            raise QueryFailed("not added:\n  " + "\n  ".join(bad))
        # One finding, one code location, and one that exists (issue 59): checked before it is
        # written, never after (a path out of the workspace, a function the file does not define).
        where = code_problems(code, Path.cwd())
        if where:
            raise QueryFailed("not added:\n  " + "\n  ".join(where))
        save(path, candidate)
        lines = [f"finding {record['number']} added to {FINDINGS_FILE}"]
        warn = check_all({"findings": [record]}, Path.cwd(), client, a.parse_query)
        lines += [f"  fix: {w}" for w in warn] or ["  checked: the code exists and every query reads what you recorded"]
        return Output(lines, 1)
    if a.action == "remove":
        kept = [f for f in data["findings"] if not (isinstance(f, dict) and f.get("number") == a.number)]
        if len(kept) == len(data["findings"]):
            raise QueryFailed(f"no finding {a.number} in {FINDINGS_FILE}")
        save(path, {"findings": kept})
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
    (Path.cwd() / "report.md").write_text(render(data, window, vocabulary()), encoding="utf-8")
    return Output([f"report.md written from {len(data['findings'])} finding(s)"], len(data["findings"]))


def add_parser(sub, parse_query) -> None:
    """`obs finding ...` beside `obs drive`; `parse_query` reads a cited `obs` command (see
    `_query_problems`)."""
    finding = sub.add_parser("finding", help="record findings as structured records (findings.json)")
    actions = finding.add_subparsers(dest="action", required=True)
    p = actions.add_parser("add", help="add one finding (checked as it is written)")
    p.add_argument("--claim", required=True, help="what is wrong and what it causes")
    p.add_argument("--impact", help="what it causes, if not in the claim")
    vocab = vocabulary()
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
                        + ", optionally with a route, span, metric or attribute: shop-api:'POST /orders'. "
                        + TARGET_HELP)
    p.add_argument("--file", required=True, help="the one accused file, relative to the workspace (src/...)")
    p.add_argument("--function", help="the one accused function (or module-level name) that file defines")
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
