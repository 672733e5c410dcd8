"""A simulated student's project, held in memory, and the opencode-style tools an agent
runs against it: read, write, edit, list, glob, grep and bash (plus polite answers for
opencode's other tools). Builds and tests are simulated: their output is canned, their
duration is drawn from the user's seeded random source, and the first test run of a
session fails with probability `test_fail_rate`.

A tool never raises: every outcome, errors included, is a `ToolResult` whose text goes
back to the model, as opencode sends a failed tool's error to the model.
"""

from __future__ import annotations

import json
import posixpath
import random
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from harness.load.classroom_scenarios import ROOT, Scenario

MAX_OUTPUT_CHARS = 30_000  # opencode keeps about 50 KB of a tool's output; we keep less
READ_LIMIT = 2000  # lines, opencode's default
READ_LINE_CHARS = 2000
GREP_LIMIT = 100
GLOB_LIMIT = 100

# Simulated seconds for the quick tools (builds and tests draw theirs).
QUICK_S = {"read": 0.1, "list": 0.1, "glob": 0.1, "grep": 0.2, "write": 0.2, "edit": 0.2, "bash": 0.3,
           "question": 5.0, "webfetch": 0.5, "websearch": 0.5, "task": 2.0}
OTHER_S = 0.2

BUILD_WORDS = {"mvn", "mvnw", "gradle", "gradlew", "javac", "java", "python", "python3", "pip", "pip3", "uv",
               "poetry", "make", "npm", "node", "cargo", "go"}
TEST_GOALS = {"mvn": {"test", "verify", "package", "install"}, "mvnw": {"test", "verify", "package", "install"},
              "gradle": {"test", "check", "build"}, "gradlew": {"test", "check", "build"}}
SEGMENT_SPLIT = re.compile(r"&&|\|\||;|\|")


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def run_kind(segment: str) -> str | None:
    """"test", "build" or None for one shell command (judged by its command word)."""
    words = _words(segment)
    while words and (re.fullmatch(r"\w+=.*", words[0]) or words[0] in ("sudo", "env", "time", "nohup")):
        words = words[1:]
    if not words:
        return None
    first, rest = posixpath.basename(words[0]), words[1:]
    if first in ("pytest", "py.test") or "pytest" in rest and first in ("uv", "poetry", "pipx"):
        return "test"
    if first in ("python", "python3") and rest[:1] == ["-m"] and rest[1:2] in (["pytest"], ["unittest"]):
        return "test"
    if TEST_GOALS.get(first, set()) & set(rest):
        return "test"
    return "build" if first in BUILD_WORDS else None


@dataclass(frozen=True)
class ToolResult:
    output: str
    error: bool = False
    seconds: float = 0.0  # simulated duration
    run: str | None = None  # "build" | "test" for a simulated build or test run
    failed: bool = False  # a test run that failed


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


# ---------------------------------------------------------------- the tools


class Toolbox:
    """Runs one session's tool calls against its project. `rng` is the user's own seeded
    source: build and test durations and the first-test-run failure are drawn from it."""

    def __init__(self, project: Project, scenario: Scenario, rng: random.Random, *, test_fail_rate: float = 0.3,
                 tool_time: tuple[float, float] = (3.0, 12.0)) -> None:
        self.project = project
        self.scenario = scenario
        self.rng = rng
        self.test_fail_rate = test_fail_rate
        self.tool_time = tool_time
        self.test_runs = 0
        self.test_failures = 0
        self.builds = 0

    def run(self, name: str, arguments: str | dict | None) -> ToolResult:
        """Run tool `name` with its JSON `arguments` (a string, as the model streamed it)."""
        if isinstance(arguments, dict):
            args = arguments
        else:
            try:
                args = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                return ToolResult(f"Error: the arguments of {name} are not valid JSON ({exc.msg})", error=True)
            if not isinstance(args, dict):
                return ToolResult(f"Error: the arguments of {name} must be a JSON object", error=True)
        handler = getattr(self, f"tool_{name}", None)
        if handler is None:
            return self.other(name)
        try:
            result = handler(args)
        except (ValueError, TypeError) as exc:  # a bad path or argument: the model is told, as opencode tells it
            result = ToolResult(f"Error: {exc}", error=True)
        seconds = result.seconds or QUICK_S.get(name, OTHER_S)
        if len(result.output) > MAX_OUTPUT_CHARS:
            cut = result.output[-MAX_OUTPUT_CHARS:]
            result = ToolResult(f"(output truncated to its last {MAX_OUTPUT_CHARS} characters)\n{cut}",
                                result.error, seconds, result.run, result.failed)
        return ToolResult(result.output, result.error, seconds, result.run, result.failed)

    # -- helpers

    def _path(self, args: dict, key: str = "filePath") -> str:
        value = args.get(key, args.get("path"))
        if not isinstance(value, str) or not value:
            raise ValueError(f"missing required argument {key}")
        return self.project.resolve(value)

    @staticmethod
    def _abs(rel: str) -> str:
        return posixpath.join(ROOT, rel) if rel else ROOT

    # -- files

    def tool_read(self, args: dict) -> ToolResult:
        rel = self._path(args)
        if rel not in self.project.files:
            if self.project.is_dir(rel):
                raise ValueError(f"{self._abs(rel)} is a directory; use the list tool")
            raise ValueError(f"File not found: {self._abs(rel)}")
        offset = max(0, int(args.get("offset") or 0))
        limit = max(1, int(args.get("limit") or READ_LIMIT))
        lines = self.project.files[rel].split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        shown = lines[offset:offset + limit]
        body = "\n".join(f"{offset + k + 1:05d}| {line[:READ_LINE_CHARS]}" for k, line in enumerate(shown))
        if offset + limit < len(lines):
            tail = f"(File has more lines. Use 'offset' parameter to read beyond line {offset + limit})"
        else:
            tail = f"(End of file - total {len(lines)} lines)"
        return ToolResult(f"<file>\n{body}\n\n{tail}\n</file>")

    def tool_write(self, args: dict) -> ToolResult:
        rel = self._path(args)
        content = args.get("content")
        if not isinstance(content, str):
            raise ValueError("missing required argument content")
        if rel == "" or self.project.is_dir(rel) and rel not in self.project.files:
            raise ValueError(f"{self._abs(rel)} is a directory")
        self.project.put(rel, content)
        return ToolResult("Wrote file successfully.")

    def tool_edit(self, args: dict) -> ToolResult:
        rel = self._path(args)
        old, new = args.get("oldString"), args.get("newString")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ValueError("oldString and newString are required strings")
        if old == new:
            raise ValueError("oldString and newString must be different")
        if old == "":  # opencode: an empty oldString writes newString as the whole file
            self.project.put(rel, new)
            return ToolResult("Edit applied successfully.")
        if rel not in self.project.files:
            raise ValueError(f"File {self._abs(rel)} not found")
        text = self.project.files[rel]
        count = text.count(old)
        if count == 0:
            raise ValueError("oldString not found in content")
        if count > 1 and not args.get("replaceAll"):
            raise ValueError("Found multiple matches for oldString. Provide more surrounding lines in oldString "
                             "to identify the correct match, or set replaceAll.")
        self.project.put(rel, text.replace(old, new) if args.get("replaceAll") else text.replace(old, new, 1))
        return ToolResult("Edit applied successfully.")

    def tool_list(self, args: dict) -> ToolResult:
        rel = self.project.resolve(args.get("path"))
        if not self.project.is_dir(rel):
            raise ValueError(f"{self._abs(rel)} is not a directory")
        ignore = args.get("ignore") or []
        return ToolResult(self.project.tree(rel, tuple(g for g in ignore if isinstance(g, str))))

    def tool_glob(self, args: dict) -> ToolResult:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("missing required argument pattern")
        rel = self.project.resolve(args.get("path"))
        prefix = rel + "/" if rel else ""
        hits = [f for f in self.project.under(rel) if glob_matches(pattern, f[len(prefix):])]
        if not hits:
            return ToolResult("No files found")
        lines = [self._abs(f) for f in hits[:GLOB_LIMIT]]
        if len(hits) > GLOB_LIMIT:
            lines += ["", "(Results are truncated. Consider using a more specific path or pattern.)"]
        return ToolResult("\n".join(lines))

    def tool_grep(self, args: dict) -> ToolResult:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("missing required argument pattern")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        rel = self.project.resolve(args.get("path"))
        if rel in self.project.files:  # grep on one file
            files = [rel]
        else:
            prefix = rel + "/" if rel else ""
            include = args.get("include")
            files = [f for f in self.project.under(rel)
                     if not include or glob_matches(str(include), f[len(prefix):])]
        hits: list[tuple[str, int, str]] = []
        for f in files:
            for number, line in enumerate(self.project.files[f].split("\n"), 1):
                if regex.search(line):
                    hits.append((f, number, line))
        if not hits:
            return ToolResult("No files found")
        shown = hits[:GREP_LIMIT]
        out = [f"Found {len(hits)} matches"]
        current = None
        for f, number, line in shown:
            if f != current:
                out += ([""] if current else []) + [f"{self._abs(f)}:"]
                current = f
            out.append(f"  Line {number}: {line[:READ_LINE_CHARS]}")
        if len(hits) > GREP_LIMIT:
            out += ["", "(Results are truncated. Consider using a more specific path or pattern.)"]
        return ToolResult("\n".join(out))

    # -- the shell

    def tool_bash(self, args: dict) -> ToolResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("missing required argument command")
        segments = [seg.strip() for seg in SEGMENT_SPLIT.split(command) if seg.strip()]
        kinds = {run_kind(seg) for seg in segments}
        if "test" in kinds:
            return self.test_run()
        if "build" in kinds:
            self.builds += 1
            seconds = self.rng.uniform(*self.tool_time)
            return ToolResult(self.scenario.build_output(seconds), seconds=seconds, run="build")
        return ToolResult("\n".join(o for o in (self._shell(seg) for seg in segments) if o))

    def test_run(self) -> ToolResult:
        """A simulated test run: the session's first may fail (once); the rest pass."""
        first = self.test_runs == 0
        self.test_runs += 1
        failed = first and self.rng.random() < self.test_fail_rate
        self.test_failures += failed
        seconds = self.rng.uniform(*self.tool_time)
        tests = max(1, self.scenario.count_tests(self.project.files))
        return ToolResult(self.scenario.test_output(tests, failed, seconds), seconds=seconds, run="test",
                          failed=failed)

    def _shell(self, segment: str) -> str:
        words = _words(segment)
        if not words:
            return ""
        cmd, rest = words[0], [w for w in words[1:] if not w.startswith("-")]
        try:
            if cmd in ("ls", "tree"):
                rel = self.project.resolve(rest[0] if rest else None)
                if cmd == "tree" or not self.project.is_dir(rel):
                    return self.project.tree(rel) if self.project.is_dir(rel) else f"ls: {rest[0]}: No such file"
                prefix = rel + "/" if rel else ""
                names = sorted({f[len(prefix):].split("/")[0] for f in self.project.files if f.startswith(prefix)})
                return "\n".join(names)
            if cmd == "find":
                rel = self.project.resolve(rest[0] if rest else None)
                return "\n".join("./" + f for f in sorted(self.project.under(rel)))
            if cmd in ("cat", "head", "tail"):
                texts = []
                for arg in rest:
                    if arg.isdigit():
                        continue
                    rel = self.project.resolve(arg)
                    text = self.project.files.get(rel)
                    if text is None:
                        texts.append(f"{cmd}: {arg}: No such file or directory")
                        continue
                    lines = text.split("\n")
                    texts.append("\n".join(lines[:10] if cmd == "head" else lines[-10:] if cmd == "tail" else lines))
                return "\n".join(texts)
        except ValueError as exc:
            return f"{cmd}: {exc}"
        if cmd == "pwd":
            return ROOT
        if cmd == "echo":
            return " ".join(words[1:])
        if cmd == "git":
            changed = sorted(f for f, t in self.project.mtime.items() if t > 0)
            if "status" in words:
                if not changed:
                    return "On branch main\nnothing to commit, working tree clean"
                return "On branch main\nChanges not staged for commit:\n" + "\n".join(
                    f"\tmodified:   {f}" for f in changed)
            return ""
        return ""

    # -- opencode's other tools

    def other(self, name: str) -> ToolResult:
        if name in ("webfetch", "websearch", "codesearch"):
            return ToolResult(f"Error: {name} is not available: the lab machines have no network access.",
                              error=True, seconds=QUICK_S.get(name, OTHER_S))
        if name == "question":
            return ToolResult("The student is busy; proceed with reasonable assumptions.", seconds=QUICK_S[name])
        if name in ("todowrite", "todoread"):
            return ToolResult("[]" if name == "todoread" else "Todo list updated.", seconds=OTHER_S)
        if name == "task":  # a subagent is not simulated with model calls: it answers with an overview
            todo = self.tool_grep({"pattern": "TODO"}).output
            return ToolResult(f"{self.project.tree()}\n\n{todo}", seconds=QUICK_S["task"])
        if name in ("skill", "lsp", "patch", "multiedit", "batch"):
            return ToolResult(f"Error: the {name} tool is not available in this session.", error=True,
                              seconds=OTHER_S)
        return ToolResult(f"Error: Model tried to call unavailable tool '{name}'.", error=True, seconds=OTHER_S)
