"""The code a finding accuses, looked up in the mission's own sources (never the agent-writable
workspace): files, and the functions each of those files defines that the finding names
(`file.py: the stats handler` names `stats`; a cited query's `now()` accuses nothing: the text
it reads is the finding's prose, `cited.prose`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from harness.verdicts.cited import prose

# A path as people write it: relative, `./`, `workspace/`, absolute, or a library's
# (`.../site-packages/httpx/_client.py`, which is not the mission's code and accuses nothing).
# Each pattern starts a match only where a token starts (the look-behinds): a long run of word
# characters is then scanned once, not once per position (issue 59: 100 rows of long prose took 210 s).
_FILE = re.compile(r"(?<![\w.~-])((?:[\w.~-]+/|/)*[\w-]+\.py)\b")
_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|/usr/lib/|\.venv/|/opt/)")
# `name()` written as a call of the mission's own code: not a method or library call (`db.query()`,
# `httpx.AsyncClient()`), which names no function of the sources by itself.
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(\)")
# `app.py:stats`, `app.py::stats`, `app.py#stats`, `app.py: the stats handler`, `app.py (stats)`
_FILE_FN = re.compile(r"(?<![\w.-])([\w-]+\.py)\s*(?:::|[:#]|,)?\s*(?:\(\s*)?(?:(?:the|a|an|its|in|function|def|method|handler|"
                      r"route|tool|endpoint)\s+)*`?([A-Za-z_]\w*)`?(?:\(\))?", re.IGNORECASE)
# `complete in src/shop_agent/model.py`, `call() of api.py`, `the stats handler in app.py`
_FN_IN_FILE = re.compile(r"(?<!\w)`?([A-Za-z_]\w*)`?(?:\(\))?(?:\s+(?:handler|function|method|route|tool|coroutine))?\s+"
                         r"(?:in|of|from|inside|within)\s+(?:the\s+)?(?:file\s+|module\s+)?`?((?:[\w.~-]+/|/)*[\w-]+\.py)",
                         re.IGNORECASE)
_ROLE = r"(?:handler|function|def|method|route|tool|endpoint|coroutine)"
_NAMED = re.compile(rf"`([A-Za-z_]\w*)(?:\(\))?`|\b([a-z]+_[a-z0-9_]+)\b|\b{_ROLE}\s+`?([A-Za-z_]\w*)|"
                    rf"\b(?:the\s+)?`?([A-Za-z_]\w*)`?\s+{_ROLE}\b|\bin\s+`?([A-Za-z_]\w*)`?\s*\(", re.IGNORECASE)
CODE_TEXT_CAP = 8000  # characters of a finding's prose searched for the code it accuses
_NOT_NAMES = {"the", "a", "an", "its", "in", "of", "function", "def", "method", "handler", "route", "tool",
              "endpoint", "this", "that", "each", "every", "one", "async", "sync", "http", "get", "post", "api"}


@cache
def _defs(sources: Path) -> dict[str, frozenset[str]]:
    """Relative path of each Python file of the sources → the names it defines: its functions,
    and its module-level names (`operation_duration = meter.create_histogram(...)`, `log`), since
    a defect may live at module level where no function is to be named."""
    out = {}
    for path in sorted(Path(sources).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            tree = ast.Module(body=[], type_ignores=[])
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        out[path.relative_to(sources).as_posix()] = frozenset(names)
    return out


@dataclass
class Accused:
    files: set[str] = field(default_factory=set)  # relative to the sources, existing
    functions: set[str] = field(default_factory=set)  # defined in the sources
    missing: list[str] = field(default_factory=list)  # named, but not in the sources
    # file -> the accused functions that file defines: what "file AND function" is checked on
    in_file: dict[str, set[str]] = field(default_factory=dict)
    module_level: bool = False  # the finding places the defect at module level (no function to name)

    def accuses(self, file: str, functions: set[str], module: bool = False) -> bool:
        """The defect's code: its file, and one of its functions (or module-level names) as defined
        in that file; for a defect the key places at module level, the file said to be at fault there."""
        if self.in_file.get(file, set()) & functions:
            return True
        return module and file in self.files and self.module_level


_MODULE_WORDS = re.compile(r"module[- ]level|at module|at import|module scope|logger (?:setup|config)|"
                           r"\bpropagate\b|declared (?:but|and) never", re.IGNORECASE)


def accused_code(text: str, sources: Path | None, first_only: bool = False) -> Accused:
    """The files and functions a finding names that the mission's sources hold, and those it
    names explicitly (`x.py`, `file.py:name`) that they lack. The cited queries are taken out
    first; `file.py: the stats handler` names `stats` in that file, as does `stats in file.py`.
    A path may be written relative, `./`, `workspace/` or absolute; a library's path accuses
    nothing and is not missing; a library call (`create_default_context()`) is not missing either.

    `first_only` (issue 59: one finding, one code location): only the first location the text
    names counts, the first function named with its file (`stats in app.py`, `app.py: stats`), else
    the first file and the first of its functions named after it; a row naming every function
    of a file accuses one."""
    acc = Accused()
    if sources is None or not Path(sources).is_dir():
        return acc
    text = prose(text)[:CODE_TEXT_CAP]
    defs = _defs(Path(sources))
    every = set().union(*defs.values()) if defs else set()
    acc.module_level = bool(_MODULE_WORDS.search(text))

    def files_named(name: str) -> list[str]:
        if _LIBRARY.search(name):
            return []
        name = name.lstrip("~")
        for prefix in ("./", "workspace/"):
            name = name.removeprefix(prefix)
        parts = name.strip("/").split("/")
        # An absolute path names the sources' file it ends with (`/tmp/x/workspace/src/a.py`).
        return [f for f in defs if f == name or f.endswith("/" + name) or
                (name.startswith("/") and "/".join(parts[-len(f.split("/")):]) == f)]

    def shown(name: str) -> str:
        return name if not name.startswith(("/", "~")) else Path(name).name  # never a host path

    named_files: list[tuple[int, str]] = []  # (position, file of the sources)
    for m in _FILE.finditer(text):
        name = m.group(1)
        hits = files_named(name)
        if hits:
            acc.files.update(hits)
            named_files += [(m.start(), h) for h in hits]
        elif not _LIBRARY.search(name) and shown(name) not in acc.missing:
            acc.missing.append(shown(name))
    pairs = [(m.start(), m.group(1), m.group(2), m.group(0)) for m in _FILE_FN.finditer(text)]
    pairs += [(m.start(), Path(m.group(2)).name, m.group(1), m.group(0)) for m in _FN_IN_FILE.finditer(text)]
    located: list[tuple[int, str, str]] = []  # (position, file, function it defines)
    for pos, file, fn, whole in pairs:
        if fn.lower() in _NOT_NAMES or fn.endswith("py"):
            continue
        hits = files_named(file)
        if hits and not any(fn in defs[h] for h in hits) and (fn in every or "_" in fn or whole.rstrip().endswith(")")):
            label = f"{fn}() in {file}"
            if label not in acc.missing and whole.lstrip().startswith(file):
                acc.missing.append(label)
        located += [(pos, h, fn) for h in hits if fn in defs[h]]
        if fn in every:
            acc.functions.add(fn)
    loose: list[tuple[int, str]] = [(m.start(), g) for m in _NAMED.finditer(text) for g in m.groups()
                                    if g and g.lower() not in _NOT_NAMES]
    loose += [(m.start(), m.group(1)) for m in _CALLED.finditer(text)]
    for _, name in loose:
        if name in every:
            acc.functions.add(name)
    if first_only:
        if located:
            _, file, fn = min(located)
        elif named_files:
            _, file = min(named_files)
            after = sorted((p, n) for p, n in loose if n in defs[file])
            fn = after[0][1] if after else None
        else:
            file = fn = None
        acc.files = {file} if file else set()
        acc.functions = {fn} if fn else set()
        acc.in_file = {file: {fn} if fn else set()} if file else {}
        return acc
    for f in acc.files:
        acc.in_file[f] = set(defs[f]) & acc.functions
    return acc


def record_code(code: dict, sources: Path | None) -> Accused:
    """A structured record's accused code, from its fields alone (issue 59): one file of the
    sources, named as it is there (`src/...`, `./src/...` or `workspace/src/...`), and one function or
    module-level name that file defines, or the file at module level. Nothing else is read."""
    acc = Accused()
    if sources is None or not Path(sources).is_dir():
        return acc
    defs = _defs(Path(sources))
    file = str(code.get("file") or "")
    for prefix in ("./", "workspace/"):
        file = file.removeprefix(prefix)
    if file not in defs:
        if file:
            acc.missing.append(file if not file.startswith(("/", "~")) else Path(file).name)
        return acc
    acc.files = {file}
    fn = code.get("function")
    if isinstance(fn, str) and fn:
        if fn in defs[file]:
            acc.functions = {fn}
            acc.in_file = {file: {fn}}
        else:
            acc.missing.append(f"{fn}() in {file}")
    acc.module_level = bool(code.get("module_level"))
    return acc


def location_functions(function: str, sources: Path | None) -> set[str]:
    """The names a key location names (`place_order / get_order`, `complete (module-level
    operation_duration)`), functions and module-level names alike."""
    if sources is None or not Path(sources).is_dir():
        return set()
    every = set().union(*_defs(Path(sources)).values())
    return {w for w in re.findall(r"[A-Za-z_]\w*", function or "") if w in every}


def location_is_module_level(function: str) -> bool:
    return "module" in (function or "").lower()
