"""A simulated student's project, held in memory: its files under the lab root, the glob
matching its tools use, and the tool list (OpenAI `tools` format, opencode's names) the
agent is offered. The tools themselves are in classroom_toolbox.py."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from harness.load.classroom_scenarios import ROOT


def tool_schemas() -> list[dict]:
    """The built-in tool list, in the OpenAI `tools` format, with opencode's names and
    parameter names (opencode 1.x `filePath`; the tools also accept 2.x's `path`)."""

    def tool(name: str, description: str, props: dict, required: list[str]) -> dict:
        params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}

    s = {"type": "string"}
    n = {"type": "number"}
    return [
        tool("bash", "Run a shell command in the project directory and return its output. Use it for builds, "
             "tests and git; prefer the dedicated tools for reading, searching and editing files.",
             {"command": {**s, "description": "The command to run"},
              "timeout": {**n, "description": "Optional timeout in milliseconds"},
              "description": {**s, "description": "What the command does, in 5-10 words"}},
             ["command", "description"]),
        tool("read", "Read a file. Lines are numbered from 1; use offset and limit for long files.",
             {"filePath": {**s, "description": "Absolute path of the file"},
              "offset": {**n, "description": "Line number to start from (0-based)"},
              "limit": {**n, "description": "Number of lines to read (default 2000)"}},
             ["filePath"]),
        tool("write", "Create a file or overwrite it with new content.",
             {"filePath": {**s, "description": "Absolute path of the file"},
              "content": {**s, "description": "The whole new content"}},
             ["filePath", "content"]),
        tool("edit", "Replace an exact string in a file. The oldString must match exactly once unless "
             "replaceAll is set.",
             {"filePath": {**s, "description": "Absolute path of the file"},
              "oldString": {**s, "description": "The text to replace"},
              "newString": {**s, "description": "The replacement text"},
              "replaceAll": {"type": "boolean", "description": "Replace every occurrence"}},
             ["filePath", "oldString", "newString"]),
        tool("glob", "Find files by name pattern, such as **/*.py; newest first.",
             {"pattern": {**s, "description": "Glob pattern"},
              "path": {**s, "description": "Directory to search (default: the project)"}},
             ["pattern"]),
        tool("grep", "Search file contents with a regular expression.",
             {"pattern": {**s, "description": "Regular expression"},
              "path": {**s, "description": "Directory to search (default: the project)"},
              "include": {**s, "description": "Only files matching this glob, such as *.java"}},
             ["pattern"]),
        tool("list", "List the files and folders under a directory.",
             {"path": {**s, "description": "Absolute path of the directory (default: the project)"},
              "ignore": {"type": "array", "items": s, "description": "Glob patterns to leave out"}},
             []),
    ]


# ---------------------------------------------------------------- globs


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as ripgrep reads it: `**/` spans folders, `*` and `?` stay within one,
    `[...]` is a class and `{a,b}` alternatives."""
    return re.compile(_glob_part(pattern) + r"\Z")


def _glob_part(p: str) -> str:
    out, i = "", 0
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        elif p[i] == "[" and (end := p.find("]", i + 2)) != -1:
            body = p[i + 1:end]
            body = "^" + body[1:] if body.startswith("!") else body
            out, i = out + "[" + body.replace("\\", "\\\\") + "]", end + 1
        elif p[i] == "{" and (end := p.find("}", i)) != -1:
            out, i = out + "(?:" + "|".join(_glob_part(a) for a in p[i + 1:end].split(",")) + ")", end + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return out


def glob_matches(pattern: str, rel: str) -> bool:
    """A pattern without `/` matches a file's name at any depth; one with `/` matches its
    path relative to the search folder (gitignore/ripgrep semantics)."""
    pattern = pattern.removeprefix("./").lstrip("/")
    target = rel if "/" in pattern else posixpath.basename(rel)
    return glob_regex(pattern).match(target) is not None


# ---------------------------------------------------------------- the project


class Project:
    """Files by path relative to the root; a modification counter stands in for mtimes."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files: dict[str, str] = dict(files)
        self._clock = 0
        self.mtime: dict[str, int] = dict.fromkeys(self.files, 0)

    def put(self, rel: str, text: str) -> None:
        self._clock += 1
        self.files[rel] = text
        self.mtime[rel] = self._clock

    def resolve(self, path: str | None) -> str:
        """A path the agent gave -> a path relative to the root ('' is the root itself).
        Raises ValueError for a path outside the project."""
        if path is None or path in ("", "."):
            return ""
        joined = path if path.startswith("/") else posixpath.join(ROOT, path)
        norm = posixpath.normpath(joined)
        if norm == ROOT:
            return ""
        if not norm.startswith(ROOT + "/"):
            raise ValueError(f"{path} is outside the project directory {ROOT}")
        return norm[len(ROOT) + 1:]

    def is_dir(self, rel: str) -> bool:
        return rel == "" or any(f.startswith(rel + "/") for f in self.files)

    def under(self, rel: str) -> list[str]:
        """Files under folder `rel`, newest first, then by path."""
        prefix = rel + "/" if rel else ""
        found = [f for f in self.files if f.startswith(prefix)]
        return sorted(found, key=lambda f: (-self.mtime[f], f))

    def tree(self, rel: str = "", ignore: tuple[str, ...] = ()) -> str:
        """An indented listing, folders first, as opencode's list tool prints it."""
        prefix = rel + "/" if rel else ""
        paths = sorted(f[len(prefix):] for f in self.files if f.startswith(prefix))
        paths = [p for p in paths if not any(glob_matches(g, p) for g in ignore)]
        lines = [f"{posixpath.join(ROOT, rel) if rel else ROOT}/"]
        seen: set[str] = set()
        for path in sorted(paths, key=lambda p: (p.split("/")[:-1], p)):
            parts = path.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in seen:
                    seen.add(folder)
                    lines.append("  " * depth + parts[depth - 1] + "/")
            lines.append("  " * len(parts) + parts[-1])
        return "\n".join(lines)
