"""`llms-benchmark classroom`: the in-memory project's tools, the simulated students
against a loopback fake OpenAI server (figures checked against what the fake saw),
compaction, retries, the first-test-run rule, and refusals of bad input."""

from __future__ import annotations

import json
import random
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.errors import UserError
from harness.load.classroom import run_classroom
from harness.load.classroom_config import ClassroomConfig, load_keys, load_prompt_file
from harness.load.classroom_student import COMPACTION_PROMPT, CONTINUE_PROMPT
from harness.wire.retry_after import from_headers as retry_after
from harness.load.classroom_project import Project, glob_matches
from harness.load.classroom_toolbox import Toolbox
from harness.load.classroom_report import pct
from harness.load.classroom_scenarios import JAVA, PYTHON, ROOT

from fakes.openai_server import MODEL, Answer, FakeOpenAI, text_only

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "llms-benchmark"


def toolbox(scenario=PYTHON, seed: int = 1, **kw) -> Toolbox:
    return Toolbox(Project(scenario.files), scenario, random.Random(seed), **kw)


def simulate(fake: FakeOpenAI, tmp_path: Path, **changes) -> tuple[dict, list[dict], list[dict], Path]:
    """One fast in-process run: no ramp-up, pauses and builds at 1/1000 of their time."""
    settings = dict(base_url=fake.url, model=MODEL, users=2, scenario="python", duration_s=60, grace_s=30,
                    ramp_up_s=0, time_scale=0.001, title=False, out_dir=tmp_path / "out")
    result = run_classroom(ClassroomConfig(**{**settings, **changes}))
    folder = result.folder
    requests = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (folder / "turns.jsonl").read_text().splitlines()]
    return result.summary, requests, turns, folder


# ---------------------------------------------------------------- tools on the in-memory project


def test_read_numbers_lines_and_pages_with_offset_and_limit() -> None:
    tb = toolbox()
    out = tb.run("read", {"filePath": f"{ROOT}/chat/message.py", "offset": 2, "limit": 3})
    assert not out.error
    lines = out.output.splitlines()
    assert lines[0] == "<file>"
    assert lines[1:4] == ["00003| from __future__ import annotations", "00004| ",
                          "00005| from dataclasses import dataclass"]
    assert "Use 'offset' parameter to read beyond line 5" in out.output
    whole = tb.run("read", json.dumps({"filePath": "chat/message.py"}))  # relative to the project, as a JSON string
    assert f"(End of file - total {len(PYTHON.files['chat/message.py'].splitlines())} lines)" in whole.output
    for bad in ({"filePath": f"{ROOT}/nope.py"}, {"filePath": "/etc/passwd"}, {"filePath": f"{ROOT}/chat"},
                {"filePath": f"{ROOT}/../x"}):
        result = tb.run("read", bad)
        assert result.error and result.output.startswith("Error:"), bad


def test_edit_replaces_exactly_one_match_or_refuses() -> None:
    tb = toolbox()
    path = f"{ROOT}/chat/server.py"
    before = tb.project.files["chat/server.py"]
    # "TODO(lab)" occurs twice in server.py: refused without replaceAll, the file untouched.
    twice = tb.run("edit", {"filePath": path, "oldString": "TODO(lab)", "newString": "DONE"})
    assert twice.error and "multiple matches" in twice.output
    assert tb.project.files["chat/server.py"] == before
    missing = tb.run("edit", {"filePath": path, "oldString": "not in the file", "newString": "x"})
    assert missing.error and "not found" in missing.output
    same = tb.run("edit", {"filePath": path, "oldString": "ChatServer", "newString": "ChatServer"})
    assert same.error
    once = tb.run("edit", {"filePath": path, "oldString": "TODO(lab): /nick", "newString": "DONE: /nick"})
    assert not once.error and once.output == "Edit applied successfully."
    assert tb.project.files["chat/server.py"] == before.replace("TODO(lab): /nick", "DONE: /nick")
    every = tb.run("edit", {"filePath": path, "oldString": "self.clients", "newString": "self.peers",
                            "replaceAll": True})
    assert not every.error and "self.clients" not in tb.project.files["chat/server.py"]
    assert tb.project.files["chat/server.py"].count("self.peers") == before.count("self.clients")
    created = tb.run("edit", {"filePath": f"{ROOT}/NOTES.md", "oldString": "", "newString": "notes\n"})
    assert not created.error and tb.project.files["NOTES.md"] == "notes\n"
    wrote = tb.run("write", {"filePath": f"{ROOT}/chat/extra.py", "content": "X = 1\n"})
    assert not wrote.error and tb.project.files["chat/extra.py"] == "X = 1\n"


def test_glob_follows_ripgrep_semantics_newest_first() -> None:
    assert glob_matches("*.py", "chat/server.py")  # no slash: the name, at any depth
    assert glob_matches("**/*.py", "server.py") and glob_matches("**/*.py", "chat/server.py")
    assert glob_matches("chat/*.py", "chat/server.py")
    assert not glob_matches("chat/*.py", "chat/sub/server.py")  # `*` stays within a folder
    assert not glob_matches("*.py", "chat/server.pyc")
    assert glob_matches("test_?essage.py", "tests/test_message.py")
    assert glob_matches("**/*.{java,xml}", "pom.xml") and glob_matches("**/*.{java,xml}", "src/A.java")
    assert glob_matches("[ct]*/*.py", "tests/t.py") and not glob_matches("[!ct]*/*.py", "tests/t.py")

    tb = toolbox()
    tb.run("write", {"filePath": f"{ROOT}/chat/zeta.py", "content": ""})
    listing = tb.run("glob", {"pattern": "**/*.py"}).output.splitlines()
    assert listing[0] == f"{ROOT}/chat/zeta.py"  # the newest first
    assert sorted(listing) == sorted(f"{ROOT}/{p}" for p in [*PYTHON.files, "chat/zeta.py"] if p.endswith(".py"))
    assert tb.run("glob", {"pattern": "*.py", "path": f"{ROOT}/tests"}).output == f"{ROOT}/tests/test_message.py"
    assert tb.run("glob", {"pattern": "*.rs"}).output == "No files found"


def test_grep_regex_with_include_and_path() -> None:
    tb = toolbox(JAVA)
    out = tb.run("grep", {"pattern": r"TODO\(lab\)", "include": "*.java"}).output
    assert out.startswith("Found 4 matches")
    assert f"{ROOT}/src/main/java/lab/chat/ChatServer.java:" in out
    assert "  Line 26:         // TODO(lab): send message.format() to every client except the sender" in out
    assert tb.run("grep", {"pattern": "TODO", "include": "*.xml"}).output == "No files found"
    scoped = tb.run("grep", {"pattern": "@Test", "path": f"{ROOT}/src/test"}).output
    assert scoped.startswith("Found 4 matches") and "MessageTest.java:" in scoped and "ChatServer" not in scoped
    one_file = tb.run("grep", {"pattern": "record Message", "path": f"{ROOT}/src/main/java/lab/chat/Message.java"})
    assert one_file.output.startswith("Found 1 matches")
    bad = tb.run("grep", {"pattern": "(unclosed"})
    assert bad.error and "invalid regular expression" in bad.output


def test_list_bash_and_unknown_tools() -> None:
    tb = toolbox()
    tree = tb.run("list", {}).output.splitlines()
    assert tree[0] == f"{ROOT}/" and "  chat/" in tree and "    server.py" in tree
    assert tb.run("bash", {"command": "ls chat", "description": "x"}).output == \
        "__init__.py\nclient.py\nmessage.py\nserver.py"
    assert tb.run("bash", {"command": f"cd {ROOT} && cat README.md"}).output.startswith("# chat-lab (Python)")
    quick = tb.run("bash", {"command": "git status"})
    assert quick.seconds == pytest.approx(0.3) and "working tree clean" in quick.output
    bad_args = tb.run("edit", "{not json")
    assert bad_args.error and "not valid JSON" in bad_args.output
    unknown = tb.run("frobnicate", {})
    assert unknown.error and "unavailable tool 'frobnicate'" in unknown.output
    assert tb.run("webfetch", {"url": "http://x"}).error
    assert not tb.run("todowrite", {"todos": []}).error


def test_builds_and_tests_take_3_to_12_simulated_seconds_and_count_the_tests() -> None:
    tb = toolbox(JAVA, test_fail_rate=0.0)
    runs = [tb.run("bash", {"command": cmd}) for cmd in ("mvn -q test", "mvn -q compile", "./mvnw verify")]
    assert [r.run for r in runs] == ["test", "build", "test"]
    assert all(3 <= r.seconds <= 12 for r in runs)
    assert "Tests run: 4, Failures: 0" in runs[0].output
    tb.run("edit", {"filePath": f"{ROOT}/src/test/java/lab/chat/MessageTest.java", "oldString": "    @Test\n"
                    "    void commandsStartWithASlash", "newString": "    @Test\n    void a() {}\n\n    @Test\n"
                    "    void commandsStartWithASlash"})
    assert "Tests run: 5, Failures: 0" in tb.run("bash", {"command": "mvn test"}).output
    py = toolbox(PYTHON, test_fail_rate=0.0)
    out = py.run("bash", {"command": "cd /home/student/chat-lab && python -m pytest -q", "description": "tests"})
    assert out.run == "test" and "4 passed" in out.output


def test_first_test_run_of_a_session_fails_30_percent_of_the_time_seeded() -> None:
    first, later = [], []
    for seed in range(2000):
        tb = toolbox(seed=seed)  # the default rate, 0.3
        runs = [tb.run("bash", {"command": "python -m pytest -q"}) for _ in range(3)]
        first.append(runs[0].failed)
        later += [r.failed for r in runs[1:]]
        assert runs[0].failed == ("1 failed" in runs[0].output)
    assert 0.27 <= sum(first) / len(first) <= 0.33
    assert not any(later)  # at most once per session, and only the first run
    # Seeded: the same seeds give the same sessions.
    again = [toolbox(seed=s).run("bash", {"command": "pytest"}).failed for s in range(200)]
    assert again == first[:200]
    assert all(toolbox(seed=s, test_fail_rate=1.0).run("bash", {"command": "pytest"}).failed for s in range(20))


# ---------------------------------------------------------------- the simulation against the fake


def test_figures_match_what_the_server_saw_with_429_retry_after_and_per_user_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys.csv"
    keys.write_text("user_id,api_key\nalice,key-a\nbob,key-b\ncarol,key-c\n")

    def refuse(seen, n):  # every key's first request: 429, come back in one second
        return (429, {"Retry-After": "1"}) if n == 0 else None

    with FakeOpenAI(refuse=refuse) as fake:
        summary, requests, turns, folder = simulate(fake, tmp_path, users=3, keys_file=keys, max_turns=2)
        seen = fake.chats()
    client = summary["client"]
    assert sorted(p.name for p in folder.iterdir()) == ["requests.jsonl", "summary.csv", "summary.json",
                                                        "summary.md", "turns.jsonl"]
    assert folder.name.startswith("classroom-") and folder.name.endswith("Z")
    # Requests, retries and tokens as the server saw them.
    assert client["requests"] == len(seen) == len(requests)
    assert client["retries"] == sum(s.status == 429 for s in seen) == 3
    assert client["retries_by_status"] == {"429": 3}
    assert client["requests_ok"] == sum(s.status == 200 for s in seen) and client["requests_failed"] == 0
    assert client["prompt_tokens_total"] == sum(s.usage["prompt_tokens"] for s in seen if s.usage)
    assert client["completion_tokens_total"] == sum(s.usage["completion_tokens"] for s in seen if s.usage)
    # One key per user, never written into the records.
    assert {s.key for s in seen} == {"key-a", "key-b", "key-c"}
    assert {r["user_id"] for r in requests} == {"alice", "bob", "carol"}
    assert "key-a" not in (folder / "requests.jsonl").read_text() + (folder / "summary.json").read_text()
    # Retry-After honoured: each key's next request came at least a second after its 429.
    for key in ("key-a", "key-b", "key-c"):
        mine = [s for s in seen if s.key == key]
        assert mine[0].status == 429 and mine[1].status == 200
        assert mine[1].t - mine[0].t >= 0.99
    retries = [r for r in requests if r["kind"] == "retry"]
    assert all(r["retry_after_s"] == 1.0 and r["wait_s"] >= 0.99 and r["retry_of"] == "agent" for r in retries)
    # Percentiles are numpy's linear ones over the successful requests.
    ok = [r for r in requests if r["ok"]]
    assert client["ttft_p50_s"] == round(float(np.percentile([r["ttft_s"] for r in ok], 50)), 3)
    assert client["request_p95_s"] == round(float(np.percentile([r["e2e_s"] for r in ok], 95)), 3)
    # The server section comes from the fake's /metrics counters.
    server = summary["server"]
    assert server["available"] and server["server"] == "vllm"
    assert server["prompt_tokens"] == client["prompt_tokens_total"]
    assert server["generation_tokens"] == client["completion_tokens_total"]
    assert server["kv_usage_peak_percent"] == 25.0 and server["preemptions"] == 0
    # Every user did both requests; the text-only model was carried by the scripted steps.
    assert client["turns_completed"] == 6 and client["scripted_tool_calls"] == client["tool_calls"] > 0
    assert all(t["steps"] > 1 for t in turns)


def test_tool_calls_run_against_the_in_memory_project(tmp_path: Path) -> None:
    server_py = f"{ROOT}/chat/server.py"
    todo = "        # TODO(lab): send message.format() to every client except the sender\n"
    script = [
        [("grep", {"pattern": r"TODO\(lab\)", "include": "*.py"})],
        [("edit", {"filePath": server_py, "oldString": todo, "newString": "        for w in self.clients.values():\n"
                                                                          "            w.write(b'x')\n"})],
        [("read", {"filePath": server_py, "offset": 38, "limit": 3}), ("glob", {"pattern": "chat/*.py"})],
        [("edit", {"filePath": server_py, "oldString": "TODO(lab)", "newString": "x"}), ("read", "{broken")],
        [("bash", {"command": "python -m pytest -q", "description": "Run the tests"})],
    ]

    def reply(body: dict) -> Answer:
        if "tools" not in body:
            return text_only(body)
        last_user = max(i for i, m in enumerate(body["messages"]) if m["role"] == "user")
        step = sum(m["role"] == "assistant" for m in body["messages"][last_user:])
        if step < len(script):
            return Answer(tool_calls=script[step], prompt_tokens=1000 + step)
        return Answer(text="All done.", prompt_tokens=2000)

    with FakeOpenAI(reply=reply) as fake:
        summary, requests, turns, _ = simulate(fake, tmp_path, users=1, max_turns=1, test_fail_rate=0.0)
        seen = fake.chats()
    assert len(seen) == len(script) + 1
    tool_results = [m for m in seen[-1].messages if m["role"] == "tool"]
    calls = [c for m in seen[-1].messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert [m["tool_call_id"] for m in tool_results] == [c["id"] for c in calls]  # answered in order, by id
    grep, edit, read, glob, second_edit, bad_json, test = (m["content"] for m in tool_results)
    assert grep.startswith("Found 4 matches") and f"{ROOT}/chat/server.py:" in grep
    assert edit == "Edit applied successfully."
    assert read.splitlines()[1:4] == [  # the edit, as a later read sees it
        "00039|     async def broadcast(self, message: Message, sender: str) -> None:",
        "00040|         for w in self.clients.values():",
        "00041|             w.write(b'x')"]
    assert glob.splitlines()[0] == server_py  # edited last, so listed first
    assert set(glob.splitlines()) == {f"{ROOT}/chat/{n}" for n in ("__init__.py", "client.py", "message.py",
                                                                  "server.py")}
    assert second_edit == "Edit applied successfully."  # one TODO(lab) was left in server.py by the first edit
    assert bad_json.startswith("Error: the arguments of read are not valid JSON")
    assert "4 passed" in test
    client = summary["client"]
    assert client["tool_calls"] == 7 and client["tool_errors"] == 1 and client["scripted_tool_calls"] == 0
    assert client["test_runs"] == 1 and client["test_failures"] == 0
    assert turns[0]["completed"] and turns[0]["steps"] == len(script) + 1
    assert [r["tools"] for r in requests][:2] == [["grep"], ["edit"]]
    prompts = [1000, 1001, 1002, 1003, 1004, 2000]
    assert client["prompt_tokens_max"] == 2000
    assert client["prompt_tokens_p50"] == int(round(float(np.percentile(prompts, 50)), 0))


def test_context_is_compacted_near_the_limit(tmp_path: Path) -> None:
    def reply(body: dict) -> Answer:  # 500 prompt tokens a message: the context grows with every step
        return Answer(text="Working on it.", prompt_tokens=500 * len(body["messages"]), completion_tokens=20)

    with FakeOpenAI(reply=reply) as fake:
        # opencode's trigger: a step's tokens reach 6000 − 1000 = 5000, i.e. a prompt of 10+ messages.
        summary, requests, turns, _ = simulate(fake, tmp_path, users=1, max_turns=1, context_limit=6000,
                                               max_output=1000, test_fail_rate=0.0)
        seen = fake.chats()
    compactions = [i for i, s in enumerate(seen) if s.messages[-1]["content"] == COMPACTION_PROMPT]
    assert compactions and summary["client"]["compactions"] == len(compactions) == turns[0]["compactions"]
    assert summary["client"]["requests_by_kind"]["compaction"] == len(compactions)
    # Not before the limit: every agent step before the first compaction stayed under it.
    assert all(s.usage["prompt_tokens"] + s.usage["completion_tokens"] < 5000 for s in seen[:compactions[0] - 1])
    for i in compactions:
        before, compaction, after = seen[i - 1], seen[i], seen[i + 1]
        assert before.usage["prompt_tokens"] + before.usage["completion_tokens"] >= 5000
        assert "tools" not in compaction.body and compaction.body["max_tokens"] == 1000
        # Afterwards: the system prompt, the request, the summary and the nudge to continue.
        roles = [m["role"] for m in after.messages]
        assert roles == ["system", "user", "assistant", "user"]
        assert after.messages[2]["content"].startswith("Working on it.")
        assert after.messages[3]["content"] == CONTINUE_PROMPT
        assert len(after.messages) < len(before.messages)
    assert turns[0]["completed"] and max(r["prompt_tokens"] for r in requests if r["kind"] == "agent") < 6000


def test_compaction_that_cannot_help_ends_the_request(tmp_path: Path) -> None:
    with FakeOpenAI(reply=lambda body: Answer(text="x", prompt_tokens=90_000)) as fake:
        summary, _, turns, _ = simulate(fake, tmp_path, users=1, max_turns=1, context_limit=8000, max_output=1000)
    # Three compactions in one request, each still over the limit: the request ends there (no endless loop).
    assert [t["end"] for t in turns] == ["context"] and [t["compactions"] for t in turns] == [3]
    assert summary["client"]["requests_by_kind"] == {"agent": 4, "compaction": 3}


def test_503_without_retry_after_backs_off_then_gives_up(tmp_path: Path) -> None:
    with FakeOpenAI(refuse=lambda seen, n: (503, {})) as fake:
        summary, requests, turns, _ = simulate(fake, tmp_path, users=1, max_retries=2)
        seen = fake.chats()
    client = summary["client"]
    assert len(seen) == 3 and client["requests"] == 3
    assert client["retries"] == 2 and client["requests_failed"] == 1 and client["errors"] == {"HTTP 503": 1}
    assert [r["kind"] for r in requests] == ["retry", "retry", "agent"]
    # No Retry-After: 2 s then 4 s (±25 %), simulated, so 1/1000 of that here.
    assert 0.0015 <= requests[0]["wait_s"] <= 0.0025 and 0.003 <= requests[1]["wait_s"] <= 0.005
    assert [t["end"] for t in turns] == ["error"] and client["turns_completed"] == 0


def test_hard_stop_cuts_off_requests_under_way(tmp_path: Path) -> None:
    with FakeOpenAI(reply=lambda body: Answer(stall=True)) as fake:
        # Long enough for both users to have their first request under way on a loaded box.
        summary, requests, turns, _ = simulate(fake, tmp_path, users=2, duration_s=3.0, grace_s=0.5)
    client = summary["client"]
    assert client["cut_off"] == 2 and client["requests_failed"] == 0 and client["requests_ok"] == 0
    assert all(r["cut_off"] and r["error"] == "cut off at the hard stop" for r in requests)
    assert [t["end"] for t in turns] == ["cut_off", "cut_off"]
    assert summary["meta"]["wall_s"] < 30


def test_same_seed_same_sessions(tmp_path: Path) -> None:
    def shape(requests, turns):
        return ([(r["user"], r["kind"], r["turn"], r["step"], r["prompt_tokens"]) for r in
                 sorted(requests, key=lambda r: (r["user"], r["turn"], r["step"], r["attempt"]))],
                sorted((t["user"], t["turn"], t["kind"], t["steps"], t["test_failures"]) for t in turns))

    with FakeOpenAI() as fake:
        _, r1, t1, _ = simulate(fake, tmp_path / "a", users=3, scenario="mixed", title=True, seed=7, max_turns=2)
        _, r2, t2, _ = simulate(fake, tmp_path / "b", users=3, scenario="mixed", title=True, seed=7, max_turns=2)
    assert shape(r1, t1) == shape(r2, t2)
    assert {r["scenario"] for r in r1} == {"python", "java"}
    assert sum(r["kind"] == "title" for r in r1) == 3


def test_a_failed_first_test_run_makes_the_scripted_agent_fix_and_rerun(tmp_path: Path) -> None:
    with FakeOpenAI() as fake:
        summary, _, turns, _ = simulate(fake, tmp_path, users=2, scenario="java", max_turns=1, test_fail_rate=1.0)
    for turn in turns:
        assert turn["kind"] == "lab" and turn["test_runs"] == 2 and turn["test_failures"] == 1
    assert summary["client"]["test_failures"] == 2


# ---------------------------------------------------------------- inputs


def test_keys_file_forms_and_empty_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# class keys\nk1\nk2\n\n\n")
    assert [k.label for k in load_keys(path)] == ["line2", "line3"]
    path.write_text("user_id,api_key\nalice,cdm_1\nbob , cdm_2\n")
    assert [(k.label, k.secret) for k in load_keys(path)] == [("alice", "cdm_1"), ("bob", "cdm_2")]
    for text, line in (("alice,k1\nbob,\ncarol,k3\n", 2), ("k1\n\nk3\n", 2), ("k1\n   \n", None)):
        path.write_text(text)
        if line is None:
            assert len(load_keys(path)) == 1  # trailing blank lines are not keys
            continue
        with pytest.raises(UserError) as caught:
            load_keys(path)
        assert caught.value.file == str(path) and caught.value.line == line and "empty API key" in caught.value.message


def test_prompt_file_shapes_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "prompt.json"
    tools = [{"type": "function", "function": {"name": "read", "parameters": {}}}, {"name": "task"}]
    path.write_text(json.dumps({"system": ["header", "You are opencode."], "tools": tools}))
    prompt = load_prompt_file(path)
    assert prompt.system == ("header", "You are opencode.") and [t["function"]["name"] for t in prompt.tools] == \
        ["read", "task"]
    path.write_text(json.dumps({"messages": [{"role": "system", "content": [{"type": "text", "text": "S"}]},
                                             {"role": "user", "content": "hi"}], "tools": tools}))
    assert load_prompt_file(path).system == ("S",)
    for text, field in (('{"system": "x", "tools": [{"type": "function", "function": {}}]}', "tools[0].function.name"),
                        ('{"system": "", "tools": [{"name": "a"}]}', "system"),
                        ('{"system": "x"}', "tools")):
        path.write_text(text)
        with pytest.raises(UserError) as caught:
            load_prompt_file(path)
        assert caught.value.field == field and caught.value.file == str(path)


def test_api_key_env_is_read_at_the_last_moment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI() as fake:
        with pytest.raises(UserError) as caught:
            simulate(fake, tmp_path, api_key_env="CLASSROOM_TEST_KEY")
        assert caught.value.field == "--api-key-env" and fake.chats() == []
        monkeypatch.setenv("CLASSROOM_TEST_KEY", "shared-key")
        summary, requests, _, folder = simulate(fake, tmp_path, users=2, max_turns=1, api_key_env="CLASSROOM_TEST_KEY")
        assert {s.key for s in fake.chats()} == {"shared-key"} and summary["meta"]["api_keys"] == 1
    assert "shared-key" not in "".join(p.read_text() for p in folder.iterdir())


def test_retry_after_forms() -> None:
    import httpx

    assert retry_after(httpx.Headers({"Retry-After": "5"})) == 5.0
    assert retry_after(httpx.Headers({"retry-after-ms": "1500", "Retry-After": "5"})) == 1.5
    assert retry_after(httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0  # in the past
    assert retry_after(httpx.Headers({})) is None
    assert pct([1, 2, 3, 4], 50) == 2.5 and pct([1, 2, 3, 4], 95) == 3.85 and pct([], 50) is None
    assert pct([1000, 2001], 50, 0) == 1500 and isinstance(pct([1, 2], 50, 0), int)


# ---------------------------------------------------------------- the command


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "400", "LLMS_BENCHMARK_ROOT": str(cwd)}
    return subprocess.run([str(CLI), "classroom", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_runs_and_writes_the_results_folder(tmp_path: Path) -> None:
    with FakeOpenAI() as fake:
        done = cli([fake.url + "/v1", "--model", MODEL, "--users", "2", "--max-turns", "2", "--ramp-up", "0",
                    "--time-scale", "0.001", "--scenario", "java", "--json"], tmp_path)
        seen = fake.chats()
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    folder = Path(data["folder"])
    assert folder.parent == tmp_path / "bench-results"
    assert json.loads((folder / "summary.json").read_text())["client"] == data["client"]
    assert data["client"]["requests"] == len(seen) and data["client"]["requests_by_kind"]["title"] == 2
    assert (folder / "summary.csv").read_text().startswith("section,figure,value\nclient,requests,")
    assert len((folder / "requests.jsonl").read_text().splitlines()) == len(seen)


@pytest.mark.parametrize("case", ["unreachable", "unknown model", "empty key", "bad prompt file"])
def test_cli_refuses_bad_input_with_one_error_and_writes_nothing(tmp_path: Path, case: str) -> None:
    keys = tmp_path / "keys.csv"
    keys.write_text("alice,k1\nbob,\n")
    prompt = tmp_path / "prompt.json"
    prompt.write_text('{"system": "x", "tools": [{"type": "function", "function": {}}]}')
    with FakeOpenAI() as fake:
        url = f"http://127.0.0.1:{free_port()}" if case == "unreachable" else fake.url
        extra = {"empty key": ["--keys-file", str(keys)], "bad prompt file": ["--prompt-file", str(prompt)]}
        model = "no-such-model" if case == "unknown model" else MODEL
        done = cli([url, "--model", model, "--time-scale", "0.001", *extra.get(case, [])], tmp_path)
        seen = fake.chats()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    expected = {
        "unreachable": f"cannot reach {url}/v1/models",
        "unknown model": f"does not list model 'no-such-model' (it lists: {MODEL})",
        "empty key": f"{keys}:2: this line has an empty API key",
        "bad prompt file": f"{prompt}: field 'tools[0].function.name'",
    }[case]
    assert expected in done.stderr
    assert "fix:" in done.stderr
    assert not (tmp_path / "bench-results").exists() and seen == []


# ---------------------------------------------------------------- issue 35: the seed's command line


def _private_ca(tmp_path: Path):
    """A server TLS context signed by a private CA, the CA's PEM and a keys file (seed 002's)."""
    import ssl

    import trustme

    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    keys = tmp_path / "api-keys.csv"
    keys.write_text("alice,k1\nbob,k2\n")
    return server_tls, pem, keys


def test_the_seeds_flags_over_https_with_a_private_ca(tmp_path: Path) -> None:
    """Seed 002's own command line: --base-url, --api-keys-file, --cacert (a private CA), --users,
    --duration, --yes; the scenario defaults to java. The old names stay aliases."""
    server_tls, pem, keys = _private_ca(tmp_path)
    common = ["--model", MODEL, "--users", "2", "--max-turns", "1", "--ramp-up", "0", "--time-scale", "0.001",
              "--duration", "60", "--json"]
    with FakeOpenAI(tls=server_tls) as fake:
        assert fake.url.startswith("https://")
        done = cli(["--base-url", fake.url, "--api-keys-file", str(keys), "--cacert", str(pem), "--yes", *common],
                   tmp_path)
        seen = fake.chats()
        # Without the CA the server's certificate is refused: one clear error, nothing sent.
        (tmp_path / "no-ca").mkdir()
        refused = cli(["--base-url", fake.url, "--keys-file", str(keys), *common], tmp_path / "no-ca")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["client"]["requests"] == len(seen) > 0
    assert data["meta"]["scenario"] == "java"
    assert {s.key for s in seen} == {"k1", "k2"}  # one key per student, from --api-keys-file
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "cannot reach" in refused.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr or "certificate" in refused.stderr.lower()


def test_the_default_scenario_is_java() -> None:
    from harness.load.classroom_config import ClassroomConfig

    assert ClassroomConfig(base_url="http://127.0.0.1:1", model="m").scenario == "java"


@pytest.mark.parametrize(("args", "words"), [
    (["--base-url", "http://127.0.0.1:1", "--model", "m", "--cacert", "{tmp}/none.pem"], "no such CA bundle"),
    (["--base-url", "http://127.0.0.1:1", "--model", "m", "--cacert", "{tmp}/bad.pem"], "not a PEM CA bundle"),
    (["http://127.0.0.1:1", "--base-url", "http://127.0.0.1:2", "--model", "m"], "two base URLs"),
    (["--model", "m"], "no server URL"),
])
def test_the_seeds_flags_refuse_bad_input_by_name(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    done = cli([a.replace("{tmp}", str(tmp_path)) for a in args], tmp_path)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "fix:" in done.stderr and not (tmp_path / "bench-results").exists()


def _bare_python() -> str:
    """The interpreter under the venv, run with -S: the standard library and nothing installed."""
    import sys

    return str(Path(sys.base_prefix) / "bin" / "python3")


def test_the_student_runs_from_the_standard_library_alone(tmp_path: Path) -> None:
    """Seed 002: the simulator needs only Python. A bare interpreter (-S: no site-packages, so no
    httpx, numpy, rich or typer) runs the seed's own command line over HTTPS with a private CA,
    naming no model (the one the server lists is used)."""
    server_tls, pem, keys = _private_ca(tmp_path)
    probe = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import runpy; "
             "assert not any(m.split('.')[0] in ('httpx', 'numpy', 'rich', 'typer', 'pydantic') for m in sys.modules); "
             "runpy.run_module('harness.load.classroom_standalone', run_name='__main__')")
    with FakeOpenAI(tls=server_tls) as fake:
        done = subprocess.run(
            [_bare_python(), "-S", "-c", probe, str(REPO), "--base-url", fake.url, "--api-keys-file", str(keys),
             "--cacert", str(pem), "--users", "2", "--duration", "60", "--yes", "--max-turns", "2", "--ramp-up", "0",
             "--time-scale", "0.001", "--out-dir", str(tmp_path / "out"), "--json"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
        seen = fake.chats()
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["meta"]["model"] == MODEL and data["meta"]["scenario"] == "java"
    assert data["client"]["requests"] == len(seen) > 0 and data["client"]["requests_ok"] == len(seen)
    assert {s.key for s in seen} == {"k1", "k2"}
    assert (Path(data["folder"]) / "requests.jsonl").is_file()


def test_the_stdlib_client_reads_chunked_and_sized_bodies_and_reuses_a_connection() -> None:
    """harness/load/stdlib_http.py against a loopback HTTP/1.1 server that answers keep-alive,
    the SSE body chunked (as uvicorn sends vLLM's), then a sized one on the same connection."""
    import asyncio

    from harness.load.stdlib_http import AsyncClient, HTTPError
    from harness.wire import sse

    connections = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), b"0"))
            await reader.readexactly(length)
            if head.startswith(b"POST"):
                events = [b'data: {"n": 1}\n\n', b'data: {"n"', b': 2}\n\ndata: [DONE]\n\n']
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
                             + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nContent-Length: 5\r\n\r\nslow!")
            await writer.drain()
        writer.close()

    async def main() -> tuple[list[str], int, str | None, bytes]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, AsyncClient(read_timeout=5) as client:
            async with client.stream("POST", url + "/v1/chat/completions", json={"x": 1}) as resp:
                lines = [data async for data in sse.aevents(resp.aiter_bytes())]
            got = await client.get(url + "/x")
            try:
                await client.get("http://127.0.0.1:9/")
                refused = None
            except HTTPError as exc:
                refused = str(exc)
            assert refused and refused.startswith("ConnectError")
            return lines, got.status_code, got.headers.get("RETRY-AFTER"), got.content

    lines, status, retry, body = asyncio.run(main())
    assert lines == ['{"n": 1}', '{"n": 2}', "[DONE]"]
    assert (status, retry, body) == (429, "2", b"slow!")
    assert len(connections) == 1  # the second request went over the first connection
