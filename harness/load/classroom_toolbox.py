"""The opencode-style tools a simulated agent runs against its in-memory project (read,
write, edit, list, glob, grep and bash, plus polite answers for opencode's other tools).
Builds and tests are simulated: canned output, a duration drawn from the user's seeded
random source, and a first test run that fails with probability `test_fail_rate`.

A tool never raises: every outcome, errors included, is a `ToolResult` whose text goes
back to the model, as opencode sends a failed tool's error to the model.
"""

from __future__ import annotations

import json
import posixpath
import random
import re
import shlex
from dataclasses import dataclass

from harness.load.classroom_project import Project, glob_matches
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
