"""The observation report contract, and its parser (the fallback when there is no findings.json).

`report.md` has YAML front matter (services, window start/end, mode) and two graded
parts: an *Anomalies* table (`| # | Finding | Kind | Severity | Evidence |`) and
*Telemetry gaps* bullets. Each table row and each bullet is one finding, numbered as
the report numbers it (gaps as G1, G2, ... unless the bullet gives its own id).

The structure (headings, tables, lists, code fences, HTML blocks) is read with
markdown-it-py, never with line regexes; a table's cells are then split from its own
source lines by harness/markdown_table.py (a pipe inside backticks stays in its cell, as people
write SQL). Headings and
columns are matched by meaning ("Issues", "Evidence (query → result)", "Root cause"), not
exact text. Whatever misses the contract is parsed as far as it goes and named in
`problems` (a repeated number, a fenced or HTML table, an oversized cell, too many rows),
never raised: everything the agent wrote is hostile input.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

from harness.markdown_table import is_rule, parse, split_row, table_rows

KINDS = ("Telemetry", "Perf", "Behavior")
_KIND_ALIASES = {"telemetry": "Telemetry", "perf": "Perf", "performance": "Perf", "behavior": "Behavior",
                 "behaviour": "Behavior", "bug": "Behavior", "error": "Behavior", "errors": "Behavior",
                 "observability": "Telemetry", "latency": "Perf", "correctness": "Behavior"}
_GAP_ID = re.compile(r"^\s*(?:\*\*)?(?P<id>G\d{1,4})(?:\*\*)?\s*[.:)\-–—]\s*(?:\*\*)?\s*", re.IGNORECASE)

MAX_FINDINGS = 1000  # rows and bullets parsed; more is a named problem (they are not read)
CELL_CAP = 4000  # characters of one cell or bullet read; a longer one is a named problem (never held up)
TEXT_CAP = 2_000_000  # characters of a report read at all
_NUMBER_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,11}$")


class Finding(BaseModel):
    number: str  # "3" for an Anomalies row, "G2" for a gap
    text: str
    kind: str | None  # Telemetry / Perf / Behavior; None when the report gives none we know
    severity: str | None = None
    evidence: str = ""
    section: str  # "anomalies" | "gaps"
    code: str = ""  # the accused code when the report gives it apart (a Location column, a record's fields)
    direction: str | None = None  # the stated claim's direction against a healthy system (closed vocabulary)
    claim_kind: str | None = None  # the stated claim's kind, from the mission's vocabulary (claims.yaml)
    scope: str | None = None  # the stated claim's scope: SERVICE or SERVICE:TARGET
    queries: list[dict] | None = None  # a structured record's cited queries: [{"query", "read"}]
    code_fields: dict | None = None  # a structured record's accused code, its fields as written (file, function, ...)
    problem: str | None = None  # why this finding cannot hold up whatever it cites (oversized ...)


class Report(BaseModel):
    front_matter: dict = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    source: str = "report.md"  # or "findings.json"

    @property
    def window(self) -> tuple[str, str] | None:
        value = str(self.front_matter.get("window") or "")
        return tuple(value.split("/", 1)) if "/" in value else None  # type: ignore[return-value]


def normalise_kind(text: str) -> str | None:
    return _KIND_ALIASES.get((text or "").strip().strip("*_`\"' ").lower())


def _front_matter(text: str, problems: list[str]) -> tuple[dict, str]:
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped.startswith("---"):
        problems.append("no front matter (a `---` block with services, window, mode)")
        return {}, text
    end = stripped.find("\n---", 3)
    if end < 0:
        problems.append("front matter is not closed by a `---` line")
        return {}, text
    try:
        data = yaml.safe_load(stripped[3:end]) or {}
    except yaml.YAMLError as exc:
        problems.append(f"front matter is not valid YAML: {str(exc).splitlines()[0]}")
        data = {}
    if not isinstance(data, dict):
        problems.append("front matter is not a mapping")
        data = {}
    for key in ("services", "window", "mode"):
        if key not in data:
            problems.append(f"front matter lacks `{key}`")
    return data, stripped[end + 4:]


# --- what a reader sees -------------------------------------------------------------------

_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]{0,20})((?:\s[^<>]{0,500})?)\s?/?>")
_HIDING = re.compile(r"\bhidden\b|display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0|opacity\s*:\s*0"
                     r"|aria-hidden", re.IGNORECASE)
_HIDDEN_TAGS = {"script", "style", "template", "noscript", "head", "title"}
_LINK = re.compile(r"\[([^\[\]]{0,300})\]\([^()\s]{0,500}(?:\s{1,5}(?:\"[^\"]{0,300}\"|'[^']{0,300}'))?\)")
VISIBLE_CAP = 2_000_000  # characters of one cell read for what it shows (the report's own cap; linear)


def _visible_html(text: str) -> str:
    """Markdown text outside code spans, as a reader sees it rendered: HTML comments gone (an
    unclosed one hides the rest, as it does in a browser), hidden elements gone with what they
    hold, tags gone, `<br>` a space, a link's destination and title gone. One pass, linear."""
    out: list[str] = []
    i = 0
    hiding: list[str] = []  # the hidden elements open, innermost last
    while i < len(text):
        lt = text.find("<", i)
        if lt < 0:
            if not hiding:
                out.append(text[i:])
            break
        if not hiding:
            out.append(text[i:lt])
        if text.startswith("<!--", lt):
            end = text.find("-->", lt + 4)
            if end < 0:
                break
            i = end + 3
            continue
        m = _TAG.match(text, lt)
        if m is None:
            if not hiding:
                out.append("<")
            i = lt + 1
            continue
        closing, name, attrs = m.group(1) == "/", m.group(2).lower(), m.group(3) or ""
        if hiding:
            if closing and name == hiding[-1]:
                hiding.pop()
            elif not closing and name == hiding[-1] and not m.group(0).endswith("/>"):
                hiding.append(name)
        elif not closing and (name in _HIDDEN_TAGS or _HIDING.search(attrs)) and not m.group(0).endswith("/>"):
            hiding.append(name)
        elif name == "br" or name in ("td", "th", "p", "div", "li"):
            out.append(" ")
        elif name == "code":
            out.append("`")
        i = m.end()
    return _LINK.sub(lambda mm: mm.group(1), "".join(out))


def visible(text: str) -> str:
    """What a reader sees of a cell or a bullet (issue 59: a claim inside an HTML comment or a
    hidden element is not stated): the text outside code spans through `_visible_html`; a code
    span's text kept as written (a `<` in its SQL is SQL); entities read as the characters they show."""
    import html

    text = (text or "")[:VISIBLE_CAP]
    if "<" not in text and "](" not in text and "&" not in text:
        return text
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: the last one opens nothing
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for k, part in enumerate(parts):
        out.append(part if k % 2 else html.unescape(_visible_html(part)))
    return "`".join(out)


# --- columns and headings by meaning ------------------------------------------------------

# Checked in this order: "Evidence (query → result)" is evidence, "Root cause (code)" is code.
_ROLES = (
    ("number", re.compile(r"^(#|no\.?|nr\.?|n|id|num|number|ref)$")),
    ("evidence", re.compile(r"evidence|proof|quer(y|ies)|observ|measure|result|telemetry|\bdata\b|\bsql\b")),
    ("code", re.compile(r"\bcode\b|location|\bfile\b|\bwhere\b|root.?cause|\bcause\b|function|source")),
    ("kind", re.compile(r"^(kind|type|category|class|signal)\b")),
    ("direction", re.compile(r"^(direction|dir\.?)$")),
    ("scope", re.compile(r"^(scope|service|service:target|scope \(service(:target)?\))$")),
    ("severity", re.compile(r"severity|\bsev\b|impact|priority")),
    ("finding", re.compile(r"finding|anomal|issue|problem|description|what|claim|symptom|title|summary|defect|bug")),
)


def column_roles(header: list[str]) -> dict[str, int]:
    """Each role's column, from the header's words: the first column a role's pattern meets."""
    roles: dict[str, int] = {}
    for i, cell in enumerate(header):
        name = " ".join(re.sub(r"[*_`]", "", cell).lower().split())
        for role, pattern in _ROLES:
            if role not in roles and pattern.search(name):
                roles[role] = i
                break
    return roles


_ANOMALY_HEADING = re.compile(r"anomal|finding|issue|problem|defect|bug")
_GAP_HEADING = re.compile(r"\bgaps?\b|blind.?spot|missing telemetry|telemetry (holes|gaps?)")


def _heading_role(title: str) -> str | None:
    low = title.lower()
    if _GAP_HEADING.search(low):
        return "gaps"
    if _ANOMALY_HEADING.search(low):
        return "anomalies"
    return None


class _HTMLTable(HTMLParser):
    """The rows of HTML tables as cell texts; `<code>` kept as backticks, so cited queries stay cited."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "code" and self._cell is not None:
            self._cell.append("`")
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag):
        if tag == "code" and self._cell is not None:
            self._cell.append("`")
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _html_rows(html: str) -> list[list[str]]:
    parser = _HTMLTable()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # noqa: BLE001 - malformed HTML is read as far as it goes
        pass
    return parser.rows


# --- the document's blocks ----------------------------------------------------------------

def _blocks(body: str, problems: list[str]) -> list[tuple[str, str | None, object]]:
    """(kind, the section role it sits under, payload) in document order: kind "table" (rows
    of cells), "list" (item texts)."""
    lines = body.splitlines()
    tokens = parse(body)
    out: list[tuple[str, str | None, object]] = []
    role: str | None = None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "heading_open":
            title = tokens[i + 1].content if i + 1 < len(tokens) else ""
            role = _heading_role(title) or (role if t.tag in ("h4", "h5", "h6") else None)
            i += 3
            continue
        if t.type == "table_open" and t.map:
            out.append(("table", role, table_rows(lines, *t.map)))
            i = _skip(tokens, i, "table_close")
            continue
        if t.type == "fence" and "|" in t.content:
            rows = [split_row(line) for line in t.content.splitlines() if line.strip().startswith("|")]
            if len(rows) >= 2:
                problems.append("a table sits inside a code fence; it was read as a table (write it as plain markdown)")
                out.append(("table", role, [r for r in rows if not is_rule(r)]))
        elif t.type == "html_block" and "<table" in t.content.lower():
            # An HTML block ends at a blank line: take the source up to </table>.
            start = t.map[0] if t.map else 0
            end = next((k + 1 for k in range(start, len(lines)) if "</table" in lines[k].lower()), len(lines))
            rows = _html_rows("\n".join(lines[start:end]))
            if rows:
                problems.append("an HTML table was read as the findings table (write it as a markdown table)")
                out.append(("table", role, rows))
        elif t.type == "paragraph_open" and t.map and t.level == 0:
            src = [x for x in lines[t.map[0]:t.map[1]] if x.strip()]
            if len(src) >= 2 and all(x.lstrip().startswith("|") for x in src):
                problems.append("a table's separator row is malformed; its rows were read as a table")
                out.append(("table", role, [r for r in (split_row(x) for x in src) if not is_rule(r)]))
        elif t.type in ("bullet_list_open", "ordered_list_open") and t.level == 0:
            close = t.type.replace("_open", "_close")
            end = _skip(tokens, i, close)
            items = []
            for k in range(i, end):
                if tokens[k].type == "list_item_open" and tokens[k].level == t.level + 1 and tokens[k].map:
                    a, b = tokens[k].map
                    src = " ".join(x.strip() for x in lines[a:b] if x.strip())
                    items.append(re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", src))
            out.append(("list", role, items))
            i = end
            continue
        i += 1
    return out


def _skip(tokens, i: int, close: str) -> int:
    level = tokens[i].level
    for k in range(i + 1, len(tokens)):
        if tokens[k].type == close and tokens[k].level == level:
            return k + 1
    return len(tokens)


# --- findings -----------------------------------------------------------------------------

def _capped(text: str, what: str, problems: list[str]) -> tuple[str, str | None]:
    if len(text) <= CELL_CAP:
        return text, None
    why = f"its {what} is {len(text):,} characters, over the {CELL_CAP:,} read"
    return text[:CELL_CAP], why


def _table_findings(rows: list[list[str]], problems: list[str], first: bool) -> list[Finding]:
    if not rows:
        return []
    header = rows[0]
    roles = column_roles(header)
    if "finding" not in roles:
        problems.append(f"a table's columns are {[h.lower() for h in header]}: none says what the finding is")
        return []
    missing = [r for r in ("number", "kind", "severity", "evidence") if r not in roles]
    if missing and first:
        problems.append(f"Anomalies table columns are {[h.lower() for h in header]}, expected "
                        f"['#', 'finding', 'kind', 'severity', 'evidence'] (no {', '.join(missing)} column)")
    findings = []
    for i, raw in enumerate(rows[1:], start=1):
        cells = [visible(c) for c in raw]  # only what a reader sees is read (issue 59)

        def get(role: str) -> str:
            return cells[roles[role]] if role in roles and roles[role] < len(cells) else ""
        number = get("number").strip("*_` ") or str(i)
        kind_text = get("kind")
        kind = normalise_kind(kind_text)
        # The form's claim columns (Kind a kind of the mission's vocabulary, Direction, Scope): kept as
        # written, checked against the vocabulary where the rows are read (`keymatch._stated_rows`).
        claim_kind = None
        if kind is None and kind_text.strip("*_` ").lower() and "direction" in roles:
            claim_kind = kind_text.strip("*_` ").lower()[:40]
        elif kind is None:
            problems.append(f"anomaly {number[:12]}: kind '{kind_text[:40]}' is not one of {', '.join(KINDS)}")
        text, why_t = _capped(get("finding"), "Finding cell", problems)
        evidence, why_e = _capped(get("evidence"), "Evidence cell", problems)
        code, why_c = _capped(get("code"), "code cell", problems)
        problem = why_t or why_e or why_c
        row = Finding(number=number, text=text, kind=kind, severity=get("severity")[:40] or None,
                      evidence=evidence, code=code, section="anomalies", problem=problem,
                      claim_kind=claim_kind, direction=get("direction").strip("*_` ").lower()[:20] or None,
                      scope=get("scope").strip("*_` ")[:200] or None)
        findings += _subfindings(row)
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
    if not row.number.isdigit() or len(row.number) > 6:
        return [row]
    marks = _sub_marks(row.number, row.text)
    if len(marks) < 2:
        return [row]
    texts = _split(row.text, marks)
    lead = row.text[:marks[0].start()].strip(" :;,")
    evidence = _split(row.evidence, _sub_marks(row.number, row.evidence))
    return [row.model_copy(update={"number": n, "text": f"{lead}: {t}" if lead else t,
                                   "evidence": evidence.get(n, row.evidence)}) for n, t in texts.items()]


def _gap_findings(items: list[str], start: int, problems: list[str]) -> list[Finding]:
    findings: list[Finding] = []
    for item in items:
        gid = _GAP_ID.match(item)
        number = gid.group("id").upper() if gid else f"G{start + len(findings) + 1}"
        item = visible(item)
        gid = _GAP_ID.match(item)
        number = gid.group("id").upper() if gid else f"G{start + len(findings) + 1}"
        text, why = _capped(item[gid.end():].strip() if gid else item.strip(), "bullet", problems)
        if text:
            findings.append(Finding(number=number, text=text, kind="Telemetry", section="gaps", problem=why))
    return findings


def _unique_numbers(findings: list[Finding], problems: list[str]) -> list[Finding]:
    """Every finding keeps a number of its own: an odd one is replaced by its position, a repeated
    one becomes `3-2`, `3-3` (each still ruled, each counted)."""
    seen: set[str] = set()
    out = []
    for pos, f in enumerate(findings, start=1):
        number = f.number
        if not _NUMBER_OK.match(number):
            problems.append(f"finding number '{number[:20]}' is not a short id; it is ruled as {pos}")
            number = str(pos)
        if number in seen:
            k = 2
            while f"{number}-{k}" in seen:
                k += 1
            problems.append(f"finding number {number} appears more than once; this one is ruled as {number}-{k}")
            number = f"{number}-{k}"
        seen.add(number)
        out.append(f if number == f.number else f.model_copy(update={"number": number}))
    return out


def parse_report(text: str) -> Report:
    problems: list[str] = []
    if len(text) > TEXT_CAP:
        problems.append(f"the report is {len(text):,} characters; only the first {TEXT_CAP:,} are read")
        text = text[:TEXT_CAP]
    front, body = _front_matter(text, problems)
    findings: list[Finding] = []
    saw_anomalies = saw_gaps = False
    gap_count = 0
    for kind, role, payload in _blocks(body, problems):
        if kind == "table" and role != "gaps":
            rows = payload  # type: ignore[assignment]
            roles = column_roles(rows[0]) if rows else {}
            # A table under an Anomalies heading, or any table that has a finding and an evidence
            # column (a title heading above it, or a heading worded otherwise).
            if role == "anomalies" or ("finding" in roles and "evidence" in roles):
                findings += _table_findings(rows, problems, first=not saw_anomalies)
                saw_anomalies = True
        elif kind == "list" and role == "gaps":
            saw_gaps = True
            gaps = _gap_findings(payload, gap_count, problems)  # type: ignore[arg-type]
            gap_count += len(gaps)
            findings += gaps
        elif kind == "table" and role == "gaps":
            saw_gaps = True
    if not saw_anomalies:
        if any(_heading_role(m) == "anomalies" for m in re.findall(r"(?m)^#{1,6}\s+(.*)$", body)):
            problems.append("the Anomalies section has no table")
        else:
            problems.append("no Anomalies section")
    if not saw_gaps and not any(_heading_role(m) == "gaps" for m in re.findall(r"(?m)^#{1,6}\s+(.*)$", body)):
        problems.append("no Telemetry gaps section")
    if len(findings) > MAX_FINDINGS:
        problems.append(f"the report lists {len(findings):,} findings; the first {MAX_FINDINGS:,} are read")
        findings = findings[:MAX_FINDINGS]
    for f in findings:
        if f.problem and f.problem not in problems:
            problems.append(f"finding {f.number[:12]}: {f.problem}")
    return Report(front_matter=front, findings=_unique_numbers(findings, problems), problems=problems)


def parse_report_file(path: Path) -> Report:
    try:
        raw = Path(path).read_bytes()[:TEXT_CAP * 4]
    except OSError as exc:
        return Report(problems=[f"the report could not be read: {exc.strerror or exc}"])
    return parse_report(raw.decode("utf-8", errors="replace"))
