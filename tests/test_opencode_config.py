"""The per-launch provider file and the isolated environment opencode runs in."""

from __future__ import annotations

import os

from harness.opencode.config import applied_effort, isolated_env, provider_config, write_provider_file
from harness.stacks.base import Unit


def _unit(served="qwen3.8-27b", ctx=262144):
    return Unit(name="vot-p", stack="local-vllm", environment="local-gpu", preset="p",
                base_url="http://127.0.0.1:8000", served_name=served, max_model_len=ctx)


def test_provider_block_is_the_oddyssey_protocol():
    cfg = provider_config(_unit(), reasoning_parser="qwen3")
    vot = cfg["provider"]["vot"]
    assert vot["npm"] == "@ai-sdk/openai-compatible" and vot["name"] == "vllm-on-tap"
    assert vot["options"] == {"baseURL": "http://127.0.0.1:8000/v1", "apiKey": "{env:VOT_API_KEY}"}
    model = vot["models"]["qwen3.8-27b"]
    assert model == {"name": "qwen3.8-27b", "tool_call": True, "limit": {"context": 262144, "output": 32768}}
    bash = cfg["permission"]["bash"]
    assert bash["opencode"] == "deny" and bash["opencode *"] == "deny"
    # later rules win in opencode: the catch-all must come before the denials
    assert list(bash) == ["*", "opencode", "opencode *"]
    assert "ask" not in {v for v in cfg["permission"].values() if isinstance(v, str)}
    assert cfg["enabled_providers"] == ["vot"] and cfg["autoupdate"] is False and cfg["share"] == "disabled"


def test_qwen_gets_no_variant_so_effort_is_default():
    cfg = provider_config(_unit(), reasoning_parser="qwen3")
    assert applied_effort(cfg, "qwen3.8-27b", "medium") is None


def test_gpt_oss_takes_a_reasoning_effort():
    cfg = provider_config(_unit("gpt-oss-120b", 131072), reasoning_parser="openai_gptoss")
    model = cfg["provider"]["vot"]["models"]["gpt-oss-120b"]
    assert model["reasoning"] is True
    assert model["variants"]["high"] == {"reasoningEffort": "high"}
    assert applied_effort(cfg, "gpt-oss-120b", "high") == "high"
    assert applied_effort(cfg, "gpt-oss-120b", "max") is None


def test_isolated_env_has_its_own_home_and_xdg_and_no_user_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-user-secret")
    monkeypatch.setenv("MY_UNIT_KEY", "unit-secret-value")
    provider = write_provider_file(provider_config(_unit(), reasoning_parser=None), tmp_path / "p.json")
    env = isolated_env(tmp_path / "oc", provider, "MY_UNIT_KEY")
    for var in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR"):
        assert env[var].startswith(str(tmp_path / "oc")) and os.path.isdir(env[var])
    assert env["OPENCODE_CONFIG"] == str(provider)
    assert env["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1" and env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert "OPENROUTER_API_KEY" not in env
    assert env["VOT_API_KEY"] == "unit-secret-value"  # handed over through the environment only
    assert "unit-secret-value" not in provider.read_text()
    assert isolated_env(tmp_path / "oc2", provider, None)["VOT_API_KEY"] == "none"


def test_preflight_refuses_an_opencode_that_is_not_the_pinned_version(tmp_path):
    """The issue's case: a stand-in answering 1.18.32 passed as "installed at the pinned version"."""
    import pytest

    from harness.errors import PreflightError
    from harness.opencode.binary import PINNED_VERSION, opencode_version

    fake = tmp_path / "opencode"
    fake.write_text("#!/bin/sh\necho 1.18.32\n")
    fake.chmod(0o755)
    with pytest.raises(PreflightError) as caught:
        opencode_version(fake)
    assert f"opencode 1.18.32, not the pinned {PINNED_VERSION}" in caught.value.message
    assert "make setup" in caught.value.fix and "LLMS_BENCHMARK_OPENCODE" in caught.value.fix
    fake.write_text(f"#!/bin/sh\necho {PINNED_VERSION}\n")
    assert opencode_version(fake) == PINNED_VERSION


def test_the_version_is_asked_once_per_installed_file_and_again_when_it_changes(tmp_path, monkeypatch):
    """`opencode --version` costs a node and a bun start each launch: cached by the file's identity,
    never trusted past a reinstall (another inode, size or mtime), never caching a refused one."""
    import os

    import pytest

    from harness.errors import PreflightError
    from harness.opencode.binary import PINNED_VERSION, opencode_version

    monkeypatch.setenv("LLMS_BENCHMARK_CACHE", str(tmp_path / "cache"))
    asked = tmp_path / "asked"
    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\necho x >> {asked}\necho {PINNED_VERSION}\n")
    fake.chmod(0o755)
    assert opencode_version(fake) == PINNED_VERSION and opencode_version(fake) == PINNED_VERSION
    assert asked.read_text().count("x") == 1
    # A reinstall of another version: the new file is asked, and refused.
    replacement = tmp_path / "new"
    replacement.write_text(f"#!/bin/sh\necho x >> {asked}\necho 1.18.32\n")
    replacement.chmod(0o755)
    os.replace(replacement, fake)
    for _ in range(2):
        with pytest.raises(PreflightError):
            opencode_version(fake)
    assert asked.read_text().count("x") == 3  # the refused version is never cached
