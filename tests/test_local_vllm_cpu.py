"""local-vllm on the cpu device, without vLLM: the files of ours a preset names (a chat template, a
tool parser plugin) are served from their shipped folders and named on the record with their
sha256; one that does not exist is refused at preflight with the file, the field and the fix."""

from __future__ import annotations

import hashlib
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from harness.errors import PreflightError
from harness.stacks import local_vllm_cpu as cpu
from harness.stacks.local_vllm import LocalVllmStack
from harness.vot.environment import load_environment
from harness.vot.preset import load_preset

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path, **args) -> Path:
    root = tmp_path / "proj"
    (root / ".vot" / "environments").mkdir(parents=True)
    (root / ".vot" / "presets").mkdir(parents=True)
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    with socket.socket() as s:  # vLLM stacks take a fixed port: pick a free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / ".vot" / "environments" / "cpu-vllm.yaml").write_text(yaml.safe_dump(
        {"name": "cpu-vllm", "stack": "local-vllm", "config": {"port": port, "device": "cpu", "vllm": str(exe)}}))
    (root / ".vot" / "presets" / "p.yaml").write_text(yaml.safe_dump(
        {"name": "p", "model": "org/not-embedded", "served_model_name": "m", "gpu_memory_gb": 1,
         "vllm_args": {"--max-model-len": 4096, "--enable-auto-tool-choice": True, **args}, "env": []}))
    return root


def _load(root: Path):
    env = load_environment(root, "cpu-vllm")
    return env, load_preset(root, "p").resolve(env.stack)


def test_the_shipped_parser_plugin_and_template_are_served_from_their_folders(tmp_path):
    root = _project(tmp_path, **{"--tool-call-parser": "fenced_json",
                                 "--tool-parser-plugin": "fenced_json_tool_parser.py",
                                 "--chat-template": "qwen2.5-coder-fenced-tools.jinja"})
    env, preset = _load(root)
    stack = LocalVllmStack(root)
    stack.preflight(env, preset)
    argv = stack.command(env, preset, 1234)
    plugin = cpu.PLUGINS / "fenced_json_tool_parser.py"
    template = cpu.TEMPLATES / "qwen2.5-coder-fenced-tools.jinja"
    assert argv[argv.index("--tool-parser-plugin") + 1] == str(plugin)
    assert argv[argv.index("--chat-template") + 1] == str(template)
    assert argv[argv.index("--tool-call-parser") + 1] == "fenced_json"
    assert stack.probe_long_cap == 4096  # the CPU prefill: never the probe's 82k
    facts = cpu.describe(stack, env, preset, "")
    assert facts["tool_parser_plugin"] == plugin.name
    assert facts["tool_parser_plugin_sha256"] == hashlib.sha256(plugin.read_bytes()).hexdigest()
    assert facts["chat_template_sha256"] == hashlib.sha256(template.read_bytes()).hexdigest()
    assert "/" not in " ".join(facts["flags"])  # records are committed: no absolute path


def test_a_plugin_of_the_project_wins_over_the_shipped_one(tmp_path):
    root = _project(tmp_path, **{"--tool-call-parser": "fenced_json", "--tool-parser-plugin": "mine/parser.py"})
    (root / "mine").mkdir()
    shutil.copy2(cpu.PLUGINS / "fenced_json_tool_parser.py", root / "mine" / "parser.py")
    env, preset = _load(root)
    argv = LocalVllmStack(root).command(env, preset, 1234)
    assert argv[argv.index("--tool-parser-plugin") + 1] == str(root / "mine" / "parser.py")


def test_a_missing_parser_plugin_is_refused_with_file_field_and_fix(tmp_path):
    root = _project(tmp_path, **{"--tool-call-parser": "fenced_json", "--tool-parser-plugin": "nope.py"})
    env, preset = _load(root)
    with pytest.raises(PreflightError) as caught:
        LocalVllmStack(root).preflight(env, preset)
    text = str(caught.value) + " " + " ".join(str(v) for v in vars(caught.value).values())
    assert "tool parser plugin nope.py not found" in text and "vllm_args.--tool-parser-plugin" in text
    assert "fenced_json_tool_parser.py" in text and "p.yaml" in text
