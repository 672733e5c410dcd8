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

from harness.telemetry.obs_finding import FINDINGS_FILE, code_text, function_at, schema_problems
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


def report_from_records(path: Path, sources: Path | None = None) -> Report:
    """The records as the findings to rule: each record's claim, kind, direction, cited queries
    and accused code as fields (no text mined for them)."""
    try:
        raw = Path(path).read_bytes()[:FINDINGS_CAP + 1]
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Report(source="findings.json", problems=[f"findings.json is not JSON: {str(exc).splitlines()[0][:160]}"])
    problems = schema_problems(data)
    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return Report(source="findings.json", problems=problems or ["findings.json has no `findings` list"])
    bad: dict[int, str] = {}
    for p in problems:  # "finding 3: field: message" -> that record's problem
        head = p.split(":", 1)[0]
        for i, item in enumerate(items):
            number = item.get("number") if isinstance(item, dict) else None
            if head in (f"finding {number}", f"finding #{i + 1}"):
                bad.setdefault(i, p.split(":", 1)[1].strip())
    findings: list[Finding] = []
    seen: set[str] = set()
    for i, item in enumerate(items[:1000]):
        if not isinstance(item, dict):
            item = {}
        number = item.get("number") if isinstance(item.get("number"), str) else str(i + 1)
        number = number[:12] or str(i + 1)
        while number in seen:
            number = f"{number}-{i + 1}"
        seen.add(number)
        code = item.get("code") if isinstance(item.get("code"), dict) else {}
        if code.get("line") and not code.get("function") and sources is not None and isinstance(code.get("file"), str):
            file = Path(sources) / str(code["file"]).removeprefix("./")
            found = function_at(file, int(code["line"])) if file.is_file() and isinstance(code["line"], int) else None
            code = {**code, "function": found} if found else {**code, "module_level": True}
        queries = [q for q in (item.get("queries") or []) if isinstance(q, dict) and isinstance(q.get("query"), str)]
        claim = str(item.get("claim") or "")[:4000]
        impact = str(item.get("impact") or "")[:4000]
        kind = item.get("kind") if item.get("kind") in ("Telemetry", "Perf", "Behavior") else None
        direction = item.get("direction") if item.get("direction") in ("higher", "lower", "absent", "present") else None
        findings.append(Finding(
            number=number, text=f"{claim} ({impact})" if impact else claim, kind=kind,
            severity=item.get("severity") if isinstance(item.get("severity"), str) else None,
            section="gaps" if item.get("section") == "gaps" else "anomalies",
            code=code_text(code) + (" module-level" if code.get("module_level") else ""),
            direction=direction, queries=queries[:10] if i not in bad else [],
            evidence="; ".join(f"`{q['query'][:4000]}` → {str(q.get('read'))[:100]}" for q in queries[:10]),
            problem=f"its record misses the findings schema: {bad[i]}" if i in bad else None))
    return Report(source="findings.json", findings=findings, problems=problems)
