"""The agent's sandbox: what it shows, what it hides, and the denials a run records.

The escape test plays a scripted trajectory through the real opencode inside bubblewrap
that tries to read the mission's hidden key by absolute path, the user's real HOME, and
another run's report: all denied, counted on the record, and none of their contents
lands anywhere in the run folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import PreflightError
from harness.sandbox import Sandbox, View, agent_view, count_denials, detect, sbpl_profile, wrap
from conftest import Project
from test_launch_e2e import SMALL_PROBE, dump

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is installed by `make setup` / .ci/run")
KEY_SECRET = "PLANTED-KEY-7f3a"
HOME_SECRET = "SSH-PRIVATE-KEY-91c2"
REPORT_SECRET = "OTHER-RUN-FINDING-4be8"


def test_without_bwrap_preflight_refuses_and_names_no_sandbox(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PreflightError) as caught:
        detect(no_sandbox=False, system="Linux")
    text = caught.value.render()
    assert "bubblewrap (bwrap) is not installed" in text and "--no-sandbox" in text
    assert detect(no_sandbox=True, system="Linux") == Sandbox("none")
    with pytest.raises(PreflightError, match="no sandbox for the agent on Plan9"):
        detect(no_sandbox=False, system="Plan9")


def test_macos_profile_denies_home_and_writes_outside_the_view(tmp_path: Path):
    view = View(writable=[tmp_path / "ws"], readable=[tmp_path / "bin"])
    profile = sbpl_profile(view, Path("/Users/me"))
    assert '(deny file-read* file-write* (subpath "/Users/me"))' in profile
    assert '(deny file-write* (subpath "/"))' in profile
    assert f'(allow file-read* file-write* (subpath "{tmp_path / "ws"}"))' in profile
    argv = wrap(Sandbox("sandbox-exec", "/usr/bin/sandbox-exec"), ["opencode", "run"], view, tmp_path, tmp_path)
    assert argv == ["/usr/bin/sandbox-exec", "-f", str(tmp_path / "sandbox.sb"), "opencode", "run"]
    assert (tmp_path / "sandbox.sb").read_text() == sbpl_profile(view, Path.home())


@needs_bwrap
def test_bwrap_shows_the_view_and_hides_the_rest(tmp_path: Path):
    ws, home, hidden = tmp_path / "ws", tmp_path / "home", tmp_path / "checkout"
    for d in (ws, home, hidden):
        d.mkdir()
    (hidden / "defects.yaml").write_text(KEY_SECRET)
    view = agent_view([ws, home], Path(sys.executable), [])
    script = (f"cat {hidden}/defects.yaml; echo rc=$?; touch /usr/x 2>&1; echo rc=$?; "
              f"echo ok > {ws}/out.txt; echo rc=$?; echo tmp=$(ls -A /tmp); "
              f"{sys.executable} -c 'import harness; print(\"harness ok\")'")
    argv = wrap(Sandbox("bwrap", BWRAP), ["/bin/sh", "-c", script], view, ws, tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert KEY_SECRET not in out
    lines = done.stdout.split()
    assert "rc=1" in lines[:3] and "Read-only file system" in out
    assert (ws / "out.txt").read_text() == "ok\n"  # the workspace is writable, through to the host
    assert "harness ok" in out  # the mission's tools (Python + harness) still run
    # A /tmp of its own: only the paths down to what the view binds there (the workspace,
    # and the checkout's venv and harness when the checkout itself lies under /tmp).
    shown = next(line for line in done.stdout.splitlines() if line.startswith("tmp="))
    under_tmp = sorted({p.parts[2] for p in [*view.writable, *view.readable]
                        if len(p.parts) > 2 and p.parts[1] == "tmp"})
    assert sorted(shown.removeprefix("tmp=").split()) == under_tmp


def test_denials_are_counted_from_the_tool_events(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    hidden = tmp_path / "checkout" / "key.yaml"
    hidden.parent.mkdir()
    hidden.write_text("x")
    view = View(writable=[ws])
    events = tmp_path / "events.jsonl"

    def tool(name, status, inp, output="", error=None):
        state = {"status": status, "input": inp, "output": output, **({"error": error} if error else {})}
        return json.dumps({"type": "tool_use", "part": {"tool": name, "state": state}})

    events.write_text("\n".join([
        tool("read", "error", {"filePath": str(hidden)}, error=f"File not found: {hidden}"),
        tool("bash", "completed", {"command": f"cat {hidden}"}, f"cat: {hidden}: No such file or directory"),
        tool("bash", "completed", {"command": "touch /usr/lib/x"}, "touch: Read-only file system"),
        tool("read", "completed", {"filePath": "notes.txt"}, "hello"),  # fine
        tool("read", "error", {"filePath": str(tmp_path / "nowhere")}, error="File not found"),  # absent on host too
        tool("bash", "completed", {"command": "cat /proc/1/status"}, "Name: bwrap"),
        "not json",
    ]))
    count, denied = count_denials(events, view, ws)
    assert count == 3, denied
    assert denied[0] == f"read: {hidden}" and denied[2] == "bash: Read-only file system"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_escape_attempts_are_denied_and_counted(project: Project, tmp_path: Path):
    key = project.root / "missions" / "hello" / "key" / "defects.yaml"
    key.parent.mkdir(parents=True)
    key.write_text(f"answer: {KEY_SECRET}\n")
    real_home = tmp_path / "realhome"
    (real_home / ".ssh").mkdir(parents=True)
    (real_home / ".ssh" / "id_ed25519").write_text(HOME_SECRET)
    (real_home / ".local" / "share" / "opencode").mkdir(parents=True)
    (real_home / ".local" / "share" / "opencode" / "auth.json").write_text(json.dumps({"k": HOME_SECRET}))
    other = project.root / ".llms-benchmark" / "runs" / "20260101T000000Z-other-medium-0000"
    other.mkdir(parents=True)
    (other / "report.md").write_text(f"| 1 | {REPORT_SECRET} |\n")
    project.env["HOME"] = str(real_home)

    steps = [
        {"tool_calls": [{"name": "read", "arguments": {"filePath": str(key)}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"cat {real_home}/.ssh/id_ed25519 "
                                                                  f"{real_home}/.local/share/opencode/auth.json",
                                                       "description": "read the real home"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"cat {other}/report.md",
                                                       "description": "read another run"}}]},
        {"tool_calls": [{"name": "write", "arguments": {"filePath": "REPORT.md", "content": "nothing to see\n"}}]},
        {"text": "DONE"},
    ]
    hello = yaml_load(Path(__file__).resolve().parents[1] / "replay" / "hello.yaml")
    hello["trajectories"][1]["steps"] = steps
    project.add_trajectory("escape", hello)
    project.add_preset("replay-escape", trajectory="escape")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-escape", "--mission", "hello",
                                      *SMALL_PROBE], timeout=300)
    assert code == 0, dump(out, err)
    run_dir, rec = project.only_run()
    assert rec["sandbox"]["kind"] == "bwrap"
    assert rec["sandbox"]["denials"] == 3, rec["sandbox"]
    denied = " ".join(rec["sandbox"]["denied"])
    assert str(key) in denied and f"{real_home}/.ssh/id_ed25519" in denied and str(other / "report.md") in denied
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (KEY_SECRET, HOME_SECRET, REPORT_SECRET):
                assert secret.encode() not in data, (secret, path)


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_no_sandbox_is_marked_on_the_record(project: Project):
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello",
                                      "--no-sandbox", *SMALL_PROBE], timeout=300)
    assert code == 0, dump(out, err)
    _, rec = project.only_run()
    assert rec["sandbox"] == {"kind": "none", "denials": 0, "denied": []}
