"""A simulated student's project, held in memory: its files under the lab root, the glob
matching its tools use, and the tool list (OpenAI `tools` format, opencode's names) the
agent is offered. The tools themselves are in classroom_toolbox.py."""

from __future__ import annotations

import fnmatch
import posixpath
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


MAX_BRACE_ALTERNATIVES = 256  # a pattern the model wrote: its `{a,b}` groups multiply, so they are bounded


def _braces(pattern: str) -> list[str]:
    """`{a,b}` alternatives spelt out, the one part of ripgrep's globs fnmatch lacks besides `**`
    (no nesting: the first `}` closes the group)."""
    out, todo = [], [pattern]
    while todo:
        p = todo.pop()
        start = p.find("{")
        end = p.find("}", start) if start >= 0 else -1
        if end < 0:
            out.append(p)
        else:
            todo += [p[:start] + alt + p[end + 1:] for alt in reversed(p[start + 1:end].split(","))]
        if len(out) + len(todo) > MAX_BRACE_ALTERNATIVES:
            raise ValueError(f"glob {pattern[:80]!r} spells out more than {MAX_BRACE_ALTERNATIVES} alternatives")
    return out


def _segments_match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """A `**` segment spans any number of folders (one or more at the pattern's end); any other
    segment is one name, by fnmatch (`*`, `?`, `[...]`, `[!...]`)."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        least = 0 if rest else 1
        return any(_segments_match(rest, path[k:]) for k in range(least, len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _segments_match(rest, path[1:])


def glob_matches(pattern: str, rel: str) -> bool:
    """A glob as ripgrep reads it (`**/` spans folders, `*` and `?` stay within one, `[...]` is a
    class and `{a,b}` alternatives). A pattern without `/` matches a file's name at any depth;
    one with `/` matches its path relative to the search folder (gitignore/ripgrep semantics)."""
    pattern = pattern.removeprefix("./").lstrip("/")
    target = rel if "/" in pattern else posixpath.basename(rel)
    path = tuple(target.split("/"))
    return any(_segments_match(tuple(p.split("/")), path) for p in _braces(pattern))


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
