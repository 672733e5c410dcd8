"""The classroom's lab project as data: the files of the chat app in Python (pytest) and in
Java (Maven + JUnit 5), and the exercises a student gets in each. A data table: its length
is the lab's, not logic's."""

from __future__ import annotations

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

JAVA_PKG = "src/main/java/lab/chat"
JAVA_TEST_PKG = "src/test/java/lab/chat"

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
    f"{JAVA_PKG}/Message.java": """package lab.chat;

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
    f"{JAVA_PKG}/ChatServer.java": """package lab.chat;

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
    f"{JAVA_PKG}/ClientHandler.java": """package lab.chat;

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
    f"{JAVA_PKG}/ChatClient.java": """package lab.chat;

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
    f"{JAVA_TEST_PKG}/MessageTest.java": """package lab.chat;

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

