"""The classroom's lab projects: a small client-server chat app in Python (pytest) or
Java (Maven + JUnit 5), the exercises students get, and the scripted steps a simulated
student's agent takes when the model itself calls no tools.

Everything here is data plus tiny functions of the in-memory project; nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

ROOT = "/home/student/chat-lab"

# ---------------------------------------------------------------- Python

PY_FILES = {
    "README.md": """# chat-lab (Python)

A tiny line-based chat: `chat/server.py` accepts TCP clients with asyncio and relays
messages between them; `chat/client.py` is a terminal client.

Protocol: one UTF-8 line per message, `<nick>: <text>`. Commands start with `/`:
`/nick NAME` renames you, `/list` lists who is online, `/quit` leaves.

Run the tests with `python -m pytest -q`. Start the server with `python -m chat.server`.
""",
    "pyproject.toml": """[project]
name = "chat-lab"
version = "0.1.0"
requires-python = ">=3.11"

[project.optional-dependencies]
test = ["pytest>=8"]

[tool.pytest.ini_options]
testpaths = ["tests"]
""",
    "chat/__init__.py": '"""Lab chat package."""\n',
    "chat/message.py": '''"""Chat messages and their one-line wire format."""

from __future__ import annotations

from dataclasses import dataclass

MAX_TEXT = 500


@dataclass(frozen=True)
class Message:
    nick: str
    text: str

    def format(self) -> str:
        return f"{self.nick}: {self.text}"


def parse(line: str) -> Message | None:
    """`nick: text` -> Message; None for a line that is not a message."""
    nick, sep, text = line.partition(":")
    if not sep:
        return None
    # TODO(lab): reject empty nicks, nicks with spaces and texts over MAX_TEXT
    return Message(nick.strip(), text.strip())


def is_command(line: str) -> bool:
    return line.startswith("/")
''',
    "chat/server.py": '''"""The chat server: one asyncio task per connected client."""

from __future__ import annotations

import asyncio
import logging

from chat.message import Message, is_command, parse

log = logging.getLogger("chat.server")


class ChatServer:
    def __init__(self) -> None:
        self.clients: dict[str, asyncio.StreamWriter] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nick = f"guest{len(self.clients) + 1}"
        self.clients[nick] = writer
        try:
            while line := (await reader.readline()).decode().rstrip("\\n"):
                if is_command(line):
                    nick = await self.command(nick, line, writer)
                    continue
                message = parse(f"{nick}:{line}")
                if message is not None:
                    await self.broadcast(message, sender=nick)
        finally:
            self.clients.pop(nick, None)
            writer.close()

    async def command(self, nick: str, line: str, writer: asyncio.StreamWriter) -> str:
        name, _, arg = line[1:].partition(" ")
        if name == "quit":
            writer.close()
        # TODO(lab): /nick NAME and /list
        return nick

    async def broadcast(self, message: Message, sender: str) -> None:
        # TODO(lab): send message.format() to every client except the sender
        log.info("would broadcast %s", message.format())


async def main(host: str = "127.0.0.1", port: int = 5555) -> None:
    server = ChatServer()
    listener = await asyncio.start_server(server.handle, host, port)
    async with listener:
        await listener.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
''',
    "chat/client.py": '''"""A terminal chat client: stdin lines go to the server, server lines go to stdout."""

from __future__ import annotations

import asyncio
import sys


async def pump_server(reader: asyncio.StreamReader) -> None:
    while line := await reader.readline():
        print(line.decode().rstrip("\\n"))


async def main(host: str = "127.0.0.1", port: int = 5555) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    # TODO(lab): read server lines concurrently instead of after stdin ends
    for line in sys.stdin:
        writer.write(line.encode())
        await writer.drain()
    await pump_server(reader)


if __name__ == "__main__":
    asyncio.run(main())
''',
    "tests/test_message.py": '''from chat.message import Message, is_command, parse


def test_parse_splits_nick_and_text():
    assert parse("alice: hello") == Message("alice", "hello")


def test_parse_refuses_a_line_without_colon():
    assert parse("hello") is None


def test_format_round_trips():
    assert parse(Message("bob", "hi there").format()) == Message("bob", "hi there")


def test_commands_start_with_a_slash():
    assert is_command("/nick carol") and not is_command("carol: /nick")
''',
}

# ---------------------------------------------------------------- Java

_PKG = "src/main/java/lab/chat"
_TEST_PKG = "src/test/java/lab/chat"

JAVA_FILES = {
    "README.md": """# chat-lab (Java)

A tiny line-based chat: `ChatServer` accepts TCP clients, one `ClientHandler` thread
each, and relays messages between them; `ChatClient` is a terminal client.

Protocol: one UTF-8 line per message, `<nick>: <text>`. Commands start with `/`:
`/nick NAME` renames you, `/list` lists who is online, `/quit` leaves.

Build and test with `mvn -q test`. Run the server with
`mvn -q exec:java -Dexec.mainClass=lab.chat.ChatServer`.
""",
    "pom.xml": """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lab</groupId>
  <artifactId>chat-lab</artifactId>
  <version>1.0-SNAPSHOT</version>
  <properties>
    <maven.compiler.release>21</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>org.junit.jupiter</groupId>
      <artifactId>junit-jupiter</artifactId>
      <version>5.11.0</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
</project>
""",
    f"{_PKG}/Message.java": """package lab.chat;

/** A chat message and its one-line wire format. */
public record Message(String nick, String text) {

    public static final int MAX_TEXT = 500;

    public String format() {
        return nick + ": " + text;
    }

    /** Parses {@code nick: text}; returns null for a line that is not a message. */
    public static Message parse(String line) {
        int colon = line.indexOf(':');
        if (colon < 0) {
            return null;
        }
        // TODO(lab): reject empty nicks, nicks with spaces and texts over MAX_TEXT
        return new Message(line.substring(0, colon).trim(), line.substring(colon + 1).trim());
    }

    public static boolean isCommand(String line) {
        return line.startsWith("/");
    }
}
""",
    f"{_PKG}/ChatServer.java": """package lab.chat;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;

/** Accepts clients and relays their messages. */
public class ChatServer {

    private final List<ClientHandler> clients = new ArrayList<>();

    public void serve(int port) throws IOException {
        try (ServerSocket listener = new ServerSocket(port)) {
            while (true) {
                Socket socket = listener.accept();
                ClientHandler handler = new ClientHandler(socket, this, "guest" + (clients.size() + 1));
                clients.add(handler);
                new Thread(handler).start();
            }
        }
    }

    public void broadcast(Message message, ClientHandler sender) {
        // TODO(lab): send message.format() to every client except the sender
        System.out.println("would broadcast " + message.format());
    }

    public void leave(ClientHandler handler) {
        clients.remove(handler);
    }

    public static void main(String[] args) throws IOException {
        new ChatServer().serve(5555);
    }
}
""",
    f"{_PKG}/ClientHandler.java": """package lab.chat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/** Reads one client's lines on its own thread. */
public class ClientHandler implements Runnable {

    private final Socket socket;
    private final ChatServer server;
    private final PrintWriter out;
    private String nick;

    public ClientHandler(Socket socket, ChatServer server, String nick) throws IOException {
        this.socket = socket;
        this.server = server;
        this.nick = nick;
        this.out = new PrintWriter(socket.getOutputStream(), true, StandardCharsets.UTF_8);
    }

    public void send(String line) {
        out.println(line);
    }

    @Override
    public void run() {
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (Message.isCommand(line)) {
                    // TODO(lab): /nick NAME, /list and /quit
                    continue;
                }
                Message message = Message.parse(nick + ":" + line);
                if (message != null) {
                    server.broadcast(message, this);
                }
            }
        } catch (IOException e) {
            System.err.println(nick + " disconnected: " + e.getMessage());
        } finally {
            server.leave(this);
        }
    }
}
""",
    f"{_PKG}/ChatClient.java": """package lab.chat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/** A terminal client: stdin lines go to the server, server lines go to stdout. */
public class ChatClient {

    public static void main(String[] args) throws IOException {
        try (Socket socket = new Socket("127.0.0.1", 5555);
             PrintWriter out = new PrintWriter(socket.getOutputStream(), true, StandardCharsets.UTF_8);
             BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            // TODO(lab): start a reader thread that prints the server's lines
            String line;
            while ((line = stdin.readLine()) != null) {
                out.println(line);
            }
        }
    }
}
""",
    f"{_TEST_PKG}/MessageTest.java": """package lab.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class MessageTest {

    @Test
    void parsesNickAndText() {
        assertEquals(new Message("alice", "hello"), Message.parse("alice: hello"));
    }

    @Test
    void refusesALineWithoutColon() {
        assertNull(Message.parse("hello"));
    }

    @Test
    void formatRoundTrips() {
        Message m = new Message("bob", "hi there");
        assertEquals(m, Message.parse(m.format()));
    }

    @Test
    void commandsStartWithASlash() {
        assertTrue(Message.isCommand("/nick carol"));
    }
}
""",
}

# ---------------------------------------------------------------- exercises

# Eight lab exercises per language; user i gets exercise i mod 8.
PY_TASKS = (
    "Implement broadcast in chat/server.py: send each message to every connected client except its sender.",
    "Implement the /nick NAME command in chat/server.py, refusing a name that is already taken.",
    "Implement the /list command in chat/server.py: reply with the sorted nicks of everyone online.",
    "Finish the TODO in chat/message.py: parse must reject empty nicks, nicks with spaces and texts "
    "over MAX_TEXT. Add tests.",
    "Keep the last 20 messages in the server and send them to a client when it joins.",
    "Fix chat/client.py so it prints the server's lines while the user is still typing.",
    "Make the server shut down gracefully on Ctrl-C: tell every client, then close the connections.",
    "Write tests for ChatServer.command and ChatServer.broadcast using fake stream writers.",
)
JAVA_TASKS = (
    "Implement ChatServer.broadcast: send each message to every connected client except its sender.",
    "Implement the /nick NAME command in ClientHandler, refusing a name that is already taken.",
    "Implement the /list command in ClientHandler: reply with the sorted nicks of everyone online.",
    "Finish the TODO in Message.parse: reject empty nicks, nicks with spaces and texts over MAX_TEXT. "
    "Add tests.",
    "Keep the last 20 messages in ChatServer and send them to a client when it joins.",
    "Fix ChatClient so it prints the server's lines on a reader thread while the user types.",
    "Make ChatServer shut down gracefully: tell every client, then close the sockets.",
    "Write JUnit tests for ClientHandler's command handling using a fake socket.",
)

# Three of these six follow an exercise, in a seeded order.
FOLLOW_UPS: tuple[tuple[str, str], ...] = (
    ("fix", "Run the tests and fix any failure."),
    ("review", "Review the server for concurrency problems and fix the worst one."),
    ("test", "Add one more unit test for what you just changed."),
    ("docs", "Add doc comments to the functions you changed."),
    ("explain", "Explain in three bullets how a message travels from one client to the others."),
    ("refactor", "Refactor the longest function in the server into smaller ones."),
)

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
    main_file=f"{_PKG}/ChatServer.java",
    test_file=f"{_TEST_PKG}/MessageTest.java",
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
