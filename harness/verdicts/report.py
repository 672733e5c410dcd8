"""The observation report contract, and its parser.

`report.md` has YAML front matter (services, window start/end, mode) and two graded
parts: an *Anomalies* table (`| # | Finding | Kind | Severity | Evidence |`) and
*Telemetry gaps* bullets. Each table row and each bullet is one finding, numbered as
the report numbers it (gaps as G1, G2, ... unless the bullet gives its own id). A
report that misses the contract is parsed as far as it goes: what could not be read
is listed in `problems`, never raised, so a person can still rule it.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

KINDS = ("Telemetry", "Perf", "Behavior")
_KIND_ALIASES = {"telemetry": "Telemetry", "perf": "Perf", "performance": "Perf", "behavior": "Behavior",
                 "behaviour": "Behavior", "bug": "Behavior", "error": "Behavior", "errors": "Behavior"}
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_GAP_ID = re.compile(r"^\s*(?:\*\*)?(?P<id>G\d+)(?:\*\*)?\s*[.:)\-–—]\s*(?:\*\*)?\s*", re.IGNORECASE)


class Finding(BaseModel):
    number: str  # "3" for an Anomalies row, "G2" for a gap
    text: str
    kind: str | None  # Telemetry / Perf / Behavior; None when the report gives none we know
    severity: str | None = None
    evidence: str = ""
    section: str  # "anomalies" | "gaps"


class Report(BaseModel):
    front_matter: dict = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    @property
    def window(self) -> tuple[str, str] | None:
        value = str(self.front_matter.get("window") or "")
        return tuple(value.split("/", 1)) if "/" in value else None  # type: ignore[return-value]


def normalise_kind(text: str) -> str | None:
    return _KIND_ALIASES.get(text.strip().strip("*_`").lower())


def _front_matter(text: str, problems: list[str]) -> tuple[dict, str]:
    if not text.startswith("---"):
        problems.append("no front matter (a `---` block with services, window, mode)")
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        problems.append("front matter is not closed by a `---` line")
        return {}, text
    try:
        data = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError as exc:
        problems.append(f"front matter is not valid YAML: {exc}")
        data = {}
    if not isinstance(data, dict):
        problems.append("front matter is not a mapping")
        data = {}
    for key in ("services", "window", "mode"):
        if key not in data:
            problems.append(f"front matter lacks `{key}`")
    return data, text[end + 4:]


def _sections(body: str) -> dict[str, list[str]]:
    """Lines under each heading, keyed by the heading's lower-cased text."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in body.splitlines():
        match = _HEADING.match(line)
        if match:
            current = match.group(2).strip().lower()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    return sections


def _find(sections: dict[str, list[str]], word: str) -> list[str] | None:
    for title, lines in sections.items():
        if word in title:
            return lines
    return None


def _cells(line: str) -> list[str]:
    # Split on pipes that are not escaped (`\|` inside evidence) and not inside backticks.
    cells, buf, in_code, prev = [], [], False, ""
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code and prev != "\\":
            cells.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        prev = ch
    cells.append("".join(buf).strip())
    return [c.replace("\\|", "|") for c in cells]


def _anomalies(lines: list[str], problems: list[str]) -> list[Finding]:
    rows = [line for line in lines if line.strip().startswith("|")]
    if not rows:
        problems.append("the Anomalies section has no table")
        return []
    header = [c.lower() for c in _cells(rows[0])]
    expected = ["#", "finding", "kind", "severity", "evidence"]
    if header[:5] != expected:
        problems.append(f"Anomalies table columns are {header}, expected {expected}")
    col = {name: header.index(name) for name in expected if name in header}
    findings = []
    for i, line in enumerate(rows[1:], start=1):
        cells = _cells(line)
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the separator row
        get = lambda name: cells[col[name]] if name in col and col[name] < len(cells) else ""  # noqa: E731
        number = get("#").strip("*") or str(i)
        kind_text = get("kind")
        kind = normalise_kind(kind_text)
        if kind is None:
            problems.append(f"anomaly {number}: kind '{kind_text}' is not one of {', '.join(KINDS)}")
        findings += _subfindings(Finding(number=number, text=get("finding"), kind=kind,
                                         severity=get("severity") or None, evidence=get("evidence"),
                                         section="anomalies"))
    return findings


def _sub_marks(number: str, text: str) -> list[re.Match]:
    """`8a)`, `(8b)`, `8c:` or `**8a.**` marking a sub-finding of row 8 in a cell."""
    pattern = re.compile(rf"(?:(?<=\s)|^|(?<=[(*|;]))\(?\*{{0,2}}({re.escape(number)}[a-z])\*{{0,2}}[).:]\*{{0,2}}(?=\s)")
    return list(pattern.finditer(text))


def _split(text: str, marks: list[re.Match]) -> dict[str, str]:
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m.group(1).lower()] = text[m.end():end].strip(" ;,")
    return out


def _subfindings(row: Finding) -> list[Finding]:
    """A row that lists sub-findings (`8a) ... 8b) ...`) is one finding per sub-finding, each with
    its own verdict: numbered 8a, 8b; each with the Evidence cell's part of the same letter when
    the cell is split the same way, else the whole cell."""
    if not row.number.isdigit():
        return [row]
    marks = _sub_marks(row.number, row.text)
    if len(marks) < 2:
        return [row]
    texts = _split(row.text, marks)
    lead = row.text[:marks[0].start()].strip(" :;,")
    evidence = _split(row.evidence, _sub_marks(row.number, row.evidence))
    return [row.model_copy(update={"number": n, "text": f"{lead}: {t}" if lead else t,
                                   "evidence": evidence.get(n, row.evidence)}) for n, t in texts.items()]


def _gaps(lines: list[str]) -> list[Finding]:
    findings: list[Finding] = []
    for line in lines:
        match = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$", line)
        if match:
            text = match.group(1).strip()
            gid = _GAP_ID.match(text)
            number = gid.group("id").upper() if gid else f"G{len(findings) + 1}"
            text = text[gid.end():].strip() if gid else text
            findings.append(Finding(number=number, text=text, kind="Telemetry", section="gaps"))
        elif findings and line.strip() and line.startswith((" ", "\t")):
            findings[-1].text += " " + line.strip()  # a wrapped bullet
    return findings


def parse_report(text: str) -> Report:
    problems: list[str] = []
    front, body = _front_matter(text, problems)
    sections = _sections(body)
    findings: list[Finding] = []
    anomalies = _find(sections, "anomal")
    if anomalies is None:
        problems.append("no Anomalies section")
    else:
        findings += _anomalies(anomalies, problems)
    gaps = _find(sections, "telemetry gap")
    if gaps is None:
        problems.append("no Telemetry gaps section")
    else:
        findings += _gaps(gaps)
    return Report(front_matter=front, findings=findings, problems=problems)


def parse_report_file(path: Path) -> Report:
    return parse_report(path.read_text(encoding="utf-8", errors="replace"))
