"""The agent's structured findings (findings.json, written with `obs finding add`): copied out of
its workspace after the run, and read as the findings a run is ruled on.

The copy never follows a link and is capped (`harness.sandbox.untrusted.read_bytes`); a linked
or oversized file is refused as the report is (the run is void). Read back, each record is
checked against the schema `obs finding` wrote it by: a record that misses it is still a
reported finding, ruled not held up with the schema's words; a file that is not JSON at all
leaves the run to its markdown report, the problem named.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.telemetry.finding_record import (FINDINGS_FILE, MAX_RECORDS, code_text, function_at, record_problems,
                                           schema_problems)
from harness.verdicts.report import Finding, Report

FINDINGS_CAP = 2_000_000  # bytes copied out of the workspace

__all__ = ["FINDINGS_FILE", "collect", "report_from_records"]


def collect(workspace: Path, run_dir: Path, refusals: list[str] | None = None) -> Path | None:
    """Copy the agent's findings.json into the run folder, never following a link; None when it
    wrote none. A refused file (a link, not a regular file, over the cap) is named in `refusals`
    (the launch's list of untrusted-file problems, which voids the run) and not copied."""
    from harness.atomic import write_atomic
    from harness.sandbox import untrusted

    try:
        data = untrusted.read_bytes(Path(workspace), FINDINGS_FILE, FINDINGS_CAP)
    except FileNotFoundError:
        return None
    except untrusted.Refused as exc:
        if refusals is not None:
            refusals.append(f"findings.json was refused: {exc}")
        return None
    except OSError as exc:
        if refusals is not None:
            refusals.append(f"findings.json could not be read: {exc.strerror or exc}")
        return None
    return write_atomic(Path(run_dir) / FINDINGS_FILE, data.decode("utf-8", errors="replace"))


RECORDS_READ = 1000  # records built into findings; past it, counted as a problem (the schema allows 200)
OBJECTS_CAP = 20_000  # JSON objects in the file, counted on the bytes before it is parsed


def report_from_records(path: Path, sources: Path | None = None, vocab=None) -> Report:
    """The records as the findings to rule: each record's claim (kind, direction, scope), cited
    queries and accused code as fields, no text mined for them. Bounded and field by field: the
    file is capped in bytes and objects before it is parsed; each record is read on its own, so
    a malformed one (a `file` that is a list, a number another record has) is a named problem of
    that record only, never an exception and never another record's."""
    if vocab is None and sources is not None:
        from harness.telemetry.claims import VocabularyError, load_vocabulary

        try:
            vocab = load_vocabulary(Path(sources).parent)
        except VocabularyError:
            vocab = None
    try:
        raw = Path(path).read_bytes()[:FINDINGS_CAP + 1]
    except OSError as exc:
        return Report(source="findings.json", problems=[f"findings.json cannot be read: {exc.strerror or exc}"])
    if len(raw) > FINDINGS_CAP:
        return Report(source="findings.json", problems=[f"findings.json is over its {FINDINGS_CAP:,} bytes"])
    if raw.count(b"{") > OBJECTS_CAP:
        return Report(source="findings.json", problems=[
            f"findings.json holds over {OBJECTS_CAP:,} JSON objects; at most {MAX_RECORDS} records are allowed"])
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Report(source="findings.json", problems=[f"findings.json is not JSON: {str(exc).splitlines()[0][:160]}"])
    problems = schema_problems(data)  # bounded: records past MAX_RECORDS counted, problems past 20 counted
    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return Report(source="findings.json", problems=problems or ["findings.json has no `findings` list"])
    if len(items) > RECORDS_READ:
        problems.append(f"findings.json: {len(items) - RECORDS_READ:,} records past the first {RECORDS_READ} "
                        "are not read")
    bad = record_problems(data, vocab, limit=RECORDS_READ)  # per record index, never per number
    findings: list[Finding] = []
    seen: set[str] = set()
    for i, item in enumerate(items[:RECORDS_READ]):
        findings.append(_finding(i, item if isinstance(item, dict) else {}, bad.get(i), seen, sources, vocab))
    return Report(source="findings.json", findings=findings, problems=problems)


def _text(value, cap: int = 4000) -> str:
    return value[:cap] if isinstance(value, str) else ""


def _code(item: dict, sources: Path | None) -> dict:
    """The accused code, only the fields of the right type (a `file` that is a list is no file)."""
    raw = item.get("code") if isinstance(item.get("code"), dict) else {}
    code: dict = {}
    if isinstance(raw.get("file"), str):
        code["file"] = raw["file"][:300]
    if isinstance(raw.get("function"), str):
        code["function"] = raw["function"][:81]
    if isinstance(raw.get("line"), int) and not isinstance(raw.get("line"), bool) and 0 < raw["line"] < 1_000_000:
        code["line"] = raw["line"]
    if raw.get("module_level") is True:
        code["module_level"] = True
    if code.get("line") and not code.get("function") and sources is not None and code.get("file"):
        file = Path(sources) / code["file"].removeprefix("./")
        try:
            inside = file.resolve().is_relative_to(Path(sources).resolve()) and file.is_file()
        except (OSError, ValueError):
            inside = False
        found = function_at(file, code["line"]) if inside else None
        code = {**code, "function": found} if found else {**code, "module_level": True}
    return code


def _finding(i: int, item: dict, bad: list[str] | None, seen: set[str], sources: Path | None, vocab) -> Finding:
    from harness.telemetry.claims import record_claim

    number = item.get("number") if isinstance(item.get("number"), str) else str(i + 1)
    number = number[:12] or str(i + 1)
    while number in seen:
        number = f"{number}-{i + 1}"
    seen.add(number)
    code = _code(item, sources)
    queries = [{"query": q["query"][:4000], "read": q.get("read") if isinstance(q.get("read"), (int, float, str))
                and not isinstance(q.get("read"), bool) else None}
               for q in (item.get("queries") if isinstance(item.get("queries"), list) else [])[:10]
               if isinstance(q, dict) and isinstance(q.get("query"), str)]
    claim, impact = _text(item.get("claim")), _text(item.get("impact"))
    stated = record_claim(item.get("kind"), item.get("direction"), item.get("scope"), vocab)
    kind = item.get("kind") if isinstance(item.get("kind"), str) else None
    category = (vocab.kinds.get(kind) if vocab is not None and kind else None) or \
        (kind if kind in ("Telemetry", "Perf", "Behavior") else None)
    severity = item.get("severity") if item.get("severity") in ("low", "medium", "high") else None
    return Finding(
        number=number, text=f"{claim} ({impact})" if impact else claim, kind=category, severity=severity,
        section="gaps" if item.get("section") == "gaps" else "anomalies",
        code=code_text(code) + (" module-level" if code.get("module_level") else ""), code_fields=code,
        direction=stated.directions[0] if stated else None, claim_kind=stated.kind if stated else None,
        scope=(item["scope"][:200] if stated else None), queries=queries if not bad else [],
        evidence="; ".join(f"`{q['query']}` → {str(q.get('read'))[:100]}" for q in queries),
        problem=f"its record misses the findings schema: {'; '.join(bad[:3])}" if bad else None)
