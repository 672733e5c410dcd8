"""What a grader model may do while ruling a finding: read-only SQL on the run's own
telemetry store, and reading the run's workspace (the code the agent observed). Nothing
else: paths are confined to the workspace, no link the agent left there is followed,
the store is opened read-only with file access off, every answer is capped in size,
and every query in time."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

from harness.sandbox import untrusted

MAX_ROWS = 50
MAX_CHARS = 12_000
QUERY_TIMEOUT_S = 20.0
MAX_GREP_HITS = 100
MAX_FILES_SCANNED = 2_000
MAX_READ_BYTES = 4 * 1024 * 1024  # a file the grader reads or greps

SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "sql",
        "description": "Run ONE read-only SQL query (DuckDB dialect) on the run's telemetry store "
                       "(tables spans, metrics, logs, profiles). At most 50 rows come back.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a file of the workspace (the code the agent observed), by path relative to it.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "offset": {"type": "integer", "description": "first line, 1-based"},
            "limit": {"type": "integer", "description": "number of lines"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "grep",
        "description": "Search the workspace's text files for a regular expression; returns path:line: text.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string", "description": "a folder to search under"}},
            "required": ["pattern"]}}},
    {"type": "function", "function": {
        "name": "list_files",
        "description": "List the files under a folder of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "rule",
        "description": "Give the verdict on the finding. Call exactly once, when the evidence is in.",
        "parameters": {"type": "object", "properties": {
            "verdict": {"type": "string", "enum": ["held up", "did not hold up"]},
            "reason": {"type": "string", "description": "one sentence: why, citing what the evidence showed"},
            "kind": {"type": "string", "enum": ["Telemetry", "Perf", "Behavior"]},
            "evidence": {"type": "array", "description": "the queries or files that decided it, with what they showed",
                         "items": {"type": "object", "properties": {
                             "query": {"type": "string"}, "result": {"type": "string"}}, "required": ["query"]}}},
            "required": ["verdict", "reason"]}}},
]


def _cap(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"\n… ({len(text) - MAX_CHARS} more characters)"


class GraderTools:
    def __init__(self, workspace: Path | None, store: Path | None) -> None:
        self.workspace = Path(workspace).resolve() if workspace and Path(workspace).is_dir() else None
        self.store = Path(store) if store and Path(store).is_file() else None
        self._con = None

    # --- the store ---------------------------------------------------------------------
    def _connection(self):
        if self._con is None:
            from harness.verdicts.evidence import open_store

            # The same confined configuration as the key-matcher's re-runs (DuckDB refuses a second
            # in-process connection to one file under another configuration).
            self._con = open_store(self.store)
        return self._con

    def sql(self, query: str) -> str:
        from harness.telemetry.readonly import BadRequest, check_read_only, jsonable, run_select

        if self.store is None:
            return "error: this run kept no telemetry store"
        try:
            check_read_only(query)
        except BadRequest as exc:
            return f"error: {exc}"
        cur = self._connection().cursor()
        timer = threading.Timer(QUERY_TIMEOUT_S, cur.interrupt)
        timer.start()
        try:
            columns, result = run_select(cur, query)
            rows = result.fetchmany(MAX_ROWS + 1)
        except Exception as exc:  # noqa: BLE001 - a failing query is the model's to read, not a crash
            return "error: " + (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        finally:
            timer.cancel()
            cur.close()
        body = {"columns": columns, "rows": [[jsonable(v) if not isinstance(v, (int, float, str, bool, type(None)))
                                               else v for v in r] for r in rows[:MAX_ROWS]],
                "truncated": len(rows) > MAX_ROWS}
        return _cap(json.dumps(body, default=str))

    # --- the workspace -----------------------------------------------------------------
    # The workspace is the agent's: a link it left (`orders.py -> /srv/secret`) is never
    # followed, by any tool; paths are checked lexically, then opened without following links.
    def _relative(self, path: str | None) -> str:
        """'' for the workspace itself, else a normalised relative path; ValueError if outside."""
        if self.workspace is None:
            raise ValueError("this run kept no workspace")
        raw = (path or ".").strip()
        if raw.startswith("/"):
            absolute = os.path.normpath(raw)
            if absolute != str(self.workspace) and not absolute.startswith(f"{self.workspace}/"):
                raise ValueError(f"{path!r} is outside the workspace")
            raw = os.path.relpath(absolute, self.workspace)
        norm = os.path.normpath(raw)
        if norm == ".":
            return ""
        if norm == ".." or norm.startswith("../"):
            raise ValueError(f"{path!r} is outside the workspace")
        return norm

    def _folder(self, relative: str) -> Path | None:
        """The folder at `relative` when no component of it is a link; None otherwise."""
        here = self.workspace
        for part in Path(relative).parts if relative else ():
            here = here / part
            if here.is_symlink() or not here.is_dir():
                return None
        return here

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        try:
            relative = self._relative(path)
            data = untrusted.read_bytes(self.workspace, relative, MAX_READ_BYTES)
        except ValueError as exc:
            return f"error: {exc}"
        except untrusted.Refused as exc:
            return f"error: {exc}"
        except OSError:
            return f"error: no file {path!r} in the workspace"
        lines = data.decode("utf-8", errors="replace").splitlines()
        start = max(int(offset or 1), 1)
        chosen = lines[start - 1:start - 1 + int(limit)] if limit else lines[start - 1:]
        return _cap("\n".join(f"{n:>5}  {line}" for n, line in enumerate(chosen, start)))

    def _files(self, under: Path):
        """Regular files under `under`, links skipped (rglob does not descend into linked folders)."""
        for n, p in enumerate(sorted(under.rglob("*"))):
            if n >= MAX_FILES_SCANNED:
                return
            if p.is_symlink() or "__pycache__" in p.parts or p.name.startswith("."):
                continue
            if any(a.is_symlink() for a in p.relative_to(under).parents if str(a) != "."):
                continue
            if stat.S_ISREG(p.lstat().st_mode):
                yield p

    def _target(self, path: str | None) -> tuple[list[Path], str | None]:
        """(files to search or list, error)."""
        try:
            relative = self._relative(path)
        except ValueError as exc:
            return [], f"error: {exc}"
        folder = self._folder(relative)
        if folder is not None:
            return list(self._files(folder)), None
        file = self.workspace / relative
        parent = self._folder(str(Path(relative).parent) if Path(relative).parent != Path(".") else "")
        if parent is not None and not file.is_symlink() and file.is_file():
            return [file], None
        return [], f"error: no folder {path!r} in the workspace (links are not followed)"

    def grep(self, pattern: str, path: str | None = None) -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return f"error: bad regular expression: {exc}"
        files, error = self._target(path)
        if error:
            return error
        hits = []
        for file in files:
            try:
                text = untrusted.read_bytes(self.workspace, str(file.relative_to(self.workspace)),
                                            MAX_READ_BYTES).decode("utf-8")
            except (OSError, UnicodeDecodeError, untrusted.Refused):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{file.relative_to(self.workspace)}:{n}: {line.strip()[:200]}")
                    if len(hits) >= MAX_GREP_HITS:
                        return _cap("\n".join(hits) + "\n… (more hits not shown)")
        return _cap("\n".join(hits)) if hits else "no match"

    def list_files(self, path: str | None = None) -> str:
        try:
            folder = self._folder(self._relative(path))
        except ValueError as exc:
            return f"error: {exc}"
        if folder is None:
            return f"error: no folder {path!r} in the workspace (links are not followed)"
        return _cap("\n".join(str(p.relative_to(self.workspace)) for p in self._files(folder)) or "(empty)")

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            if name == "sql":
                return self.sql(str(arguments["query"]))
            if name == "read_file":
                return self.read_file(str(arguments["path"]), arguments.get("offset"), arguments.get("limit"))
            if name == "grep":
                return self.grep(str(arguments["pattern"]), arguments.get("path"))
            if name == "list_files":
                return self.list_files(arguments.get("path"))
        except (KeyError, TypeError, ValueError) as exc:
            return f"error: bad arguments for {name}: {exc}"
        return f"error: no tool {name!r}; the tools are sql, read_file, grep, list_files, rule"

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
