"""The classroom's lab projects: a small client-server chat app in Python (pytest) or
Java (Maven + JUnit 5), the exercises students get, and the scripted steps a simulated
student's agent takes when the model itself calls no tools.

The lab's files and exercises are data (classroom_lab.py); here, the scenario type and
tiny functions of the in-memory project; nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from harness.load.classroom_lab import JAVA_FILES, JAVA_PKG, JAVA_TASKS, JAVA_TEST_PKG, PY_FILES, PY_TASKS, ROOT

# ---------------------------------------------------------------- the scenario type

# A scripted step: the project's files (path relative to the root -> text) -> (tool, arguments).
PlanStep = Callable[[Mapping[str, str]], tuple[str, dict]]


@dataclass(frozen=True)
class Scenario:
    name: str
    files: Mapping[str, str]
    tasks: tuple[str, ...]
    test_command: str
    main_file: str  # where the exercise's TODO lives
    test_file: str
    test_marker: str  # counts the tests in test files
    test_dir: str
    comment: str  # line-comment prefix for scripted edits
    insert_before_last_line: bool  # Java: new members go inside the class's closing brace
    def count_tests(self, files: Mapping[str, str]) -> int:
        return sum(text.count(self.test_marker) for path, text in files.items() if path.startswith(self.test_dir))

    def test_output(self, tests: int, failed: bool, seconds: float) -> str:
        """What the test runner would print: all `tests` pass, or the first one fails."""
        if self.name == "java":
            return _maven_output(tests, failed, seconds)
        return _pytest_output(self.test_file, tests, failed, seconds)

    def build_output(self, seconds: float) -> str:
        if self.name == "java":
            return (f"[INFO] Scanning for projects...\n[INFO] Building chat-lab 1.0-SNAPSHOT\n"
                    f"[INFO] Compiling 4 source files with javac [debug release 21] to target/classes\n"
                    f"[INFO] BUILD SUCCESS\n[INFO] Total time:  {seconds:.3f} s")
        return f"Compiling '{ROOT}/chat'...\n(done in {seconds:.2f}s)"


def _rule(title: str, fill: str = "=") -> str:
    """A pytest section line: the title centred in 80 columns of `fill`."""
    return f" {title} ".center(80, fill) if title else fill * 80


def _pytest_output(test_file: str, tests: int, failed: bool, seconds: float) -> str:
    head = (f"{_rule('test session starts')}\nplatform linux -- Python 3.12.3, pytest-8.3.3, pluggy-1.5.0\n"
            f"rootdir: {ROOT}\nconfigfile: pyproject.toml\ncollected {tests} items\n\n")
    if not failed:
        return head + f"{test_file} {'.' * tests} [100%]\n\n{_rule(f'{tests} passed in {seconds:.2f}s')}"
    return head + "\n".join((
        f"{test_file} F{'.' * (tests - 1)} [100%]", "", _rule("FAILURES"),
        _rule("test_parse_splits_nick_and_text", "_"),
        "", "    def test_parse_splits_nick_and_text():",
        '>       assert parse("alice: hello") == Message("alice", "hello")',
        "E       AssertionError: assert Message(nick='alice ', text='hello') == Message(nick='alice', text='hello')",
        "", f"{test_file}:5: AssertionError", _rule("short test summary info"),
        f"FAILED {test_file}::test_parse_splits_nick_and_text - AssertionError",
        _rule(f"1 failed, {tests - 1} passed in {seconds:.2f}s"),
    ))


def _maven_output(tests: int, failed: bool, seconds: float) -> str:
    head = ("[INFO] Scanning for projects...\n[INFO] Building chat-lab 1.0-SNAPSHOT\n"
            "[INFO] --- surefire:3.2.5:test (default-test) @ chat-lab ---\n[INFO] Running lab.chat.MessageTest\n")
    if not failed:
        return head + (f"[INFO] Tests run: {tests}, Failures: 0, Errors: 0, Skipped: 0\n[INFO] BUILD SUCCESS\n"
                       f"[INFO] Total time:  {seconds:.3f} s")
    return head + (
        f"[ERROR] Tests run: {tests}, Failures: 1, Errors: 0, Skipped: 0 <<< FAILURE! -- in lab.chat.MessageTest\n"
        f"[ERROR] lab.chat.MessageTest.parsesNickAndText -- Time elapsed: 0.012 s <<< FAILURE!\n"
        f"org.opentest4j.AssertionFailedError: expected: <Message[nick=alice, text=hello]> "
        f"but was: <Message[nick=alice , text=hello]>\n"
        f"\tat lab.chat.MessageTest.parsesNickAndText(MessageTest.java:13)\n"
        f"[ERROR] Tests run: {tests}, Failures: 1, Errors: 0, Skipped: 0\n[INFO] BUILD FAILURE\n"
        f"[INFO] Total time:  {seconds:.3f} s"
    )


PYTHON = Scenario(
    name="python",
    files=MappingProxyType(PY_FILES),
    tasks=PY_TASKS,
    test_command="python -m pytest -q",
    main_file="chat/server.py",
    test_file="tests/test_message.py",
    test_marker="def test_",
    test_dir="tests/",
    comment="#",
    insert_before_last_line=False,
)
JAVA = Scenario(
    name="java",
    files=MappingProxyType(JAVA_FILES),
    tasks=JAVA_TASKS,
    test_command="mvn -q test",
    main_file=f"{JAVA_PKG}/ChatServer.java",
    test_file=f"{JAVA_TEST_PKG}/MessageTest.java",
    test_marker="@Test",
    test_dir="src/test/",
    comment="//",
    insert_before_last_line=True,
)
SCENARIOS = {"python": PYTHON, "java": JAVA}
SCENARIO_CHOICES = ("python", "java", "mixed")


def scenario_for(choice: str, user: int) -> Scenario:
    """`mixed` alternates: even users get Python, odd users Java."""
    if choice == "mixed":
        return PYTHON if user % 2 == 0 else JAVA
    return SCENARIOS[choice]


# ---------------------------------------------------------------- scripted steps


def _abs(path: str) -> str:
    return f"{ROOT}/{path}"


def append_edit(files: Mapping[str, str], path: str, block: str, before_last_line: bool) -> tuple[str, dict]:
    """An `edit` that adds `block` at the end of the file (inside a Java class's closing
    brace), anchored on the shortest unique tail of the file; `write` if none is unique."""
    text = files.get(path, "")
    lines = text.rstrip("\n").split("\n")
    for k in range(1, min(6, len(lines)) + 1):
        anchor = "\n".join(lines[-k:])
        if anchor.strip() and text.count(anchor) == 1:
            tail = lines[-k:]
            new = tail[:-1] + [block, tail[-1]] if before_last_line else tail + [block]
            return "edit", {"filePath": _abs(path), "oldString": anchor, "newString": "\n".join(new)}
    return "write", {"filePath": _abs(path), "content": text.rstrip("\n") + "\n" + block + "\n"}


def _code_block(sc: Scenario, turn: int, what: str) -> str:
    if sc.name == "java":
        return (f"\n    {sc.comment} lab turn {turn}: {what}\n"
                f"    static int labHelper{turn}(int n) {{\n        return n + {turn};\n    }}")
    return (f"\n\n{sc.comment} lab turn {turn}: {what}\n"
            f"def lab_helper_{turn}(n: int) -> int:\n    return n + {turn}")


def _test_block(sc: Scenario, turn: int) -> str:
    if sc.name == "java":
        return (f"\n    @Test\n    void labCase{turn}() {{\n"
                f"        assertEquals(\"x\", Message.parse(\"x: y\").nick());\n    }}")
    return f"\n\ndef test_lab_case_{turn}():\n    assert parse(\"x: y\").nick == \"x\""


def plan(sc: Scenario, kind: str, turn: int) -> list[PlanStep]:
    """The tool calls a simulated agent makes for one user request, in order, each a
    function of the project as it is when the step runs (so edits always apply)."""
    read_main: PlanStep = lambda p: ("read", {"filePath": _abs(sc.main_file)})  # noqa: E731
    read_test: PlanStep = lambda p: ("read", {"filePath": _abs(sc.test_file)})  # noqa: E731
    run_tests: PlanStep = lambda p: ("bash", {"command": sc.test_command, "description": "Run the tests"})  # noqa: E731
    edit_main: PlanStep = lambda p: append_edit(p, sc.main_file, _code_block(sc, turn, kind),  # noqa: E731
                                                sc.insert_before_last_line)
    edit_test: PlanStep = lambda p: append_edit(p, sc.test_file, _test_block(sc, turn),  # noqa: E731
                                                sc.insert_before_last_line)
    steps: dict[str, list[PlanStep]] = {
        "lab": [
            lambda p: ("list", {"path": ROOT}),
            lambda p: ("read", {"filePath": _abs("README.md")}),
            lambda p: ("grep", {"pattern": "TODO\\(lab\\)", "path": ROOT}),
            read_main, read_test, edit_main, run_tests,
        ],
        "fix": [run_tests],
        "review": [lambda p: ("grep", {"pattern": "lock|synchronized|async def|Thread", "path": ROOT}),
                   read_main, edit_main],
        "test": [read_test, edit_test, run_tests],
        "docs": [read_main, edit_main],
        "explain": [lambda p: ("glob", {"pattern": "**/*.py" if sc.name == "python" else "**/*.java"}), read_main],
        "refactor": [read_main, edit_main, run_tests],
    }
    return list(steps[kind])


def fix_steps(sc: Scenario, turn: int) -> list[PlanStep]:
    """What the scripted agent does after a failed test run: read, edit, run again."""
    return [
        lambda p: ("read", {"filePath": _abs(sc.test_file)}),
        lambda p: append_edit(p, sc.main_file, _code_block(sc, turn, "fix the failing test"),
                              sc.insert_before_last_line),
        lambda p: ("bash", {"command": sc.test_command, "description": "Run the tests again"}),
    ]
