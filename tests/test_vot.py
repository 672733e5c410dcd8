"""The vllm-on-tap model: schemas, loading, merge and rendering."""

from __future__ import annotations

import re
import json
import shlex
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from harness.errors import UserError
from harness.vot import render
from harness.vot.environment import load_environment, load_environment_file
from harness.vot.loader import SCHEMA_DIR, check, load_yaml, schema_errors
from harness.vot.preset import load_preset, load_preset_file, missing_env
from harness.cli.validate_kinds import validate_path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_PRESETS = sorted((ROOT / ".vot" / "presets").glob("*.yaml"))
SHIPPED_ENVS = sorted((ROOT / ".vot" / "environments").glob("*.yaml"))


def write(tmp_path: Path, rel: str, text: str) -> Path:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def preset_file(tmp_path: Path, name: str, body: str) -> Path:
    return write(tmp_path, f".vot/presets/{name}.yaml", body)


# --- schemas and shipped files ------------------------------------------------


@pytest.mark.parametrize("name", ["preset", "environment"])
def test_schemas_are_valid_draft_2020_12(name):
    Draft202012Validator.check_schema(json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text()))


def test_all_shipped_files_are_there():
    assert {p.stem for p in SHIPPED_PRESETS} >= {
        "odd-qwen3-6-35b-a3b", "odd-qwen3-8-27b", "cpu-smollm2-135m", "replay-hello",
    }
    assert {p.stem for p in SHIPPED_ENVS} >= {"azure-sweden", "local-metal", "local-gpu", "cpu", "replay"}


@pytest.mark.parametrize("path", SHIPPED_PRESETS + SHIPPED_ENVS, ids=lambda p: p.name)
def test_shipped_files_validate(path):
    assert validate_path(ROOT, path).endswith(f" {path.stem}: ok")


def test_vllm_on_tap_builtin_shape_is_accepted():
    # qwen38-27b-agentic as vllm-on-tap ships it: every field and an override
    builtin = {
        "name": "qwen38-27b-agentic",
        "description": "not yet verified live",
        "model": "Qwen/Qwen3.8-27B",
        "served_model_name": "qwen3.8-27b",
        "gpu_memory_gb": 80,
        "vllm_args": {"--max-model-len": 131072, "--gpu-memory-utilization": 0.92,
                      "--enable-prefix-caching": True,
                      "--speculative-config": '{"method":"mtp","num_speculative_tokens":3}'},
        "env": ["HF_TOKEN"],
        "stacks": {"local-vllm-metal": {"model": "mlx-community/Qwen3.8-27B-4bit", "gpu_memory_gb": 48,
                                        "vllm_args": {"--speculative-config": False}},
                   "aca": {"gpu_memory_gb": 80}},
    }
    assert schema_errors(builtin, "preset") == []


def test_shipped_qwen_preset_values():
    p = load_preset(ROOT, "odd-qwen3-6-35b-a3b")
    assert p.model == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert p.served_model_name == "qwen3.6-35b-a3b"
    assert p.gpu_memory_gb == 48
    assert p.vllm_args["--speculative-config"] == '{"method": "mtp", "num_speculative_tokens": 3}'
    assert p.vllm_args["--max-num-batched-tokens"] == 32768
    r = p.resolve("azure")
    assert (r.max_model_len, r.tool_calling, r.reasoning_parser) == (262144, True, "qwen3")
    assert load_preset(ROOT, "odd-qwen3-8-27b").gpu_memory_gb == 40


def test_shipped_environments():
    assert load_environment(ROOT, "azure-sweden").config == {"location": "swedencentral", "resource_group": "rg-vot"}
    metal = load_environment(ROOT, "local-metal")
    assert (metal.stack, metal.port, metal.otlp_endpoint) == ("local-vllm-metal", 8000, None)
    cpu = load_environment(ROOT, "cpu")
    # No pinned threads: the embedded default chooses them for the box (issue 47).
    assert (cpu.stack, cpu.port, "threads" in cpu.config) == ("local-llamacpp", 0, False)
    assert load_environment(ROOT, "replay").port == 0


# --- known-bad shapes: one UserError naming file and field --------------------

GOOD = "name: {name}\nmodel: org/model\n"


def refuse(path: Path, loader=load_preset_file) -> UserError:
    with pytest.raises(UserError) as info:
        loader(path)
    err = info.value
    assert err.file == str(path)
    return err


def test_typo_key_vllm_arg(tmp_path):
    path = preset_file(tmp_path, "bad", GOOD.format(name="bad") + "vllm_arg:\n  --max-model-len: 4096\n")
    err = refuse(path)
    assert err.field == "vllm_arg"
    assert "vllm_arg" in err.message
    assert "vllm_args" in err.fix
    assert err.line == 3


def test_name_must_match_file_name(tmp_path):
    err = refuse(preset_file(tmp_path, "gemma", GOOD.format(name="other")))
    assert err.field == "name"
    assert err.fix == "rename the file or set name: gemma"


def test_env_entry_must_be_upper_case(tmp_path):
    path = preset_file(tmp_path, "p", GOOD.format(name="p") + "env:\n  - HF_HOME\n  - hf_token\n")
    err = refuse(path)
    assert err.field == "env[1]"
    assert "upper-case environment variable name like HF_TOKEN" in err.message
    assert "HF_TOKEN" in err.fix
    assert err.line == 5


def test_gpu_memory_must_be_positive(tmp_path):
    err = refuse(preset_file(tmp_path, "p", GOOD.format(name="p") + "gpu_memory_gb: 0\n"))
    assert err.field == "gpu_memory_gb"
    assert "must be greater than 0" in err.message
    assert err.line == 3


def test_gpu_memory_in_override_names_nested_field(tmp_path):
    body = GOOD.format(name="p") + "stacks:\n  azure:\n    gpu_memory_gb: -1\n"
    err = refuse(preset_file(tmp_path, "p", body))
    assert err.field == "stacks.azure.gpu_memory_gb"
    assert err.line == 5


def test_missing_model(tmp_path):
    err = refuse(preset_file(tmp_path, "p", "name: p\n"))
    assert err.field == "model"
    assert "model" in err.message


def test_bad_flag_name(tmp_path):
    body = GOOD.format(name="p") + "vllm_args:\n  max-model-len: 4096\n"
    err = refuse(preset_file(tmp_path, "p", body))
    assert err.field == "vllm_args.max-model-len"
    assert "--max-model-len" in err.fix


def test_unknown_override_key_suggests(tmp_path):
    body = GOOD.format(name="p") + "stacks:\n  local-vllm:\n    models: x\n"
    err = refuse(preset_file(tmp_path, "p", body))
    assert err.field == "stacks.local-vllm.models"
    assert "'model'" in err.fix


def test_unknown_stack_in_environment(tmp_path):
    path = write(tmp_path, ".vot/environments/k8s.yaml", "name: k8s\nstack: kubernetes\n")
    err = refuse(path, load_environment_file)
    assert err.field == "stack"
    assert "kubernetes" in err.message and "not supported" in err.message
    assert "local-vllm" in err.fix
    assert err.line == 2


def test_environment_config_checked_per_stack(tmp_path):
    path = write(tmp_path, ".vot/environments/a.yaml", "name: a\nstack: azure\nconfig:\n  location: northeurope\n")
    assert refuse(path, load_environment_file).field == "config.location"
    path = write(tmp_path, ".vot/environments/m.yaml", "name: m\nstack: local-vllm-metal\nconfig:\n  port: 0\n")
    assert refuse(path, load_environment_file).field == "config.port"
    path = write(tmp_path, ".vot/environments/c.yaml", "name: c\nstack: local-llamacpp\nconfig:\n  thread: 2\n")
    err = refuse(path, load_environment_file)
    assert (err.field, err.fix) == ("config.thread", "did you mean 'threads'?")


def test_aca_environment_with_historic_fields(tmp_path):
    body = ("name: old\nstack: aca\nconfig:\n  location: swedencentral\n  resource_group: rg-vot\n"
            "  environment: vot-env\n  storage: votcache7b4a25\n")
    env = load_environment_file(write(tmp_path, ".vot/environments/old.yaml", body))
    assert (env.stack, env.was_aca, env.port) == ("azure", True, 8000)
    assert env.config == {"location": "swedencentral", "resource_group": "rg-vot"}


def test_not_yaml_gives_the_line(tmp_path):
    path = preset_file(tmp_path, "p", "name: p\nmodel: org/model\nvllm_args:\n  --x: [1, 2\nenv: []\n")
    err = refuse(path)
    assert "not valid YAML" in err.message
    assert err.line == 5  # the flow sequence is still open when `env:` arrives


def test_not_yaml_tab_indent(tmp_path):
    err = refuse(preset_file(tmp_path, "p", "name: p\nmodel: x\n\tenv: []\n"))
    assert "not valid YAML" in err.message and err.line == 3


def test_top_level_list(tmp_path):
    err = refuse(preset_file(tmp_path, "p", "- name: p\n- model: x\n"))
    assert "mapping" in err.message and "list" in err.message


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_yaml(tmp_path / "nope.yaml")


def test_missing_preset_lists_local_ones(tmp_path):
    preset_file(tmp_path, "alpha", GOOD.format(name="alpha"))
    with pytest.raises(UserError) as info:
        load_preset(tmp_path, "beta")
    assert "alpha" in info.value.message
    assert "only local presets" in info.value.fix


def test_missing_environment_lists_available(tmp_path):
    write(tmp_path, ".vot/environments/cpu.yaml", "name: cpu\nstack: local-llamacpp\n")
    with pytest.raises(UserError, match="available: cpu"):
        load_environment(tmp_path, "gpu")


def test_schema_errors_lists_every_problem():
    errors = dict(schema_errors({"name": "P", "model": "", "gpu_memory_gb": 0}, "preset"))
    assert set(errors) == {"name", "model", "gpu_memory_gb"}


def test_check_without_problems_returns(tmp_path):
    check({"name": "x", "stack": "replay"}, "environment", tmp_path / "x.yaml")


def test_validate_refuses_unknown_kind(tmp_path):
    path = write(tmp_path, "somewhere/x.yaml", "name: x\n")
    with pytest.raises(UserError, match="cannot tell what kind of file this is") as info:
        validate_path(tmp_path, path)
    assert "preset" in info.value.fix and "environment" in info.value.fix and "mission" in info.value.fix


def test_a_capped_read_reads_no_more_than_the_cap(tmp_path):
    """Issue 63 item 5: a file over the cap is refused after reading cap + 1 bytes, never the whole
    of it (an endless one such as /dev/zero too); a file at the cap is read as it is."""
    from harness.vot.loader import read_bytes

    with pytest.raises(UserError, match=r"is more than 1024 bytes, over the 1 KiB \(1024 bytes\) a preset may be") as info:
        read_bytes(Path("/dev/zero"), cap=1024, kind="preset")
    assert info.value.file == "/dev/zero" and "a few KB" in info.value.fix
    exact = write(tmp_path, "x.yaml", "#" * 1023 + "\n")
    assert read_bytes(exact, cap=1024) == exact.read_bytes()
    with pytest.raises(UserError, match="file not found") as info:
        read_bytes(tmp_path / "none.yaml", cap=1024)
    assert info.value.fix.startswith("check the path")


# --- merge ---------------------------------------------------------------------

MERGE = """\
name: merge
model: org/big
gpu_memory_gb: 80
vllm_args:
  --max-model-len: 131072
  --speculative-config: '{"method": "mtp"}'
  --enable-auto-tool-choice: true
  --tool-call-parser: qwen3_xml
env: [HF_TOKEN]
stacks:
  local-vllm-metal:
    model: mlx-community/small
    gpu_memory_gb: 48
    vllm_args:
      --speculative-config: false
      --max-model-len: 32768
  aca:
    model: org/aca-model
"""


def test_merge_override(tmp_path):
    p = load_preset_file(preset_file(tmp_path, "merge", MERGE))
    r = p.resolve("local-vllm-metal")
    assert (r.model, r.gpu_memory_gb, r.max_model_len) == ("mlx-community/small", 48, 32768)
    assert r.vllm_args["--tool-call-parser"] == "qwen3_xml"  # untouched keys kept
    assert r.vllm_args["--speculative-config"] is False
    assert "--speculative-config" not in render.argv(r.vllm_args)
    assert list(r.vllm_args)[:2] == ["--max-model-len", "--speculative-config"]  # order kept


def test_merge_no_override(tmp_path):
    p = load_preset_file(preset_file(tmp_path, "merge", MERGE))
    r = p.resolve("local-vllm")
    assert (r.model, r.gpu_memory_gb, r.vllm_args) == ("org/big", 80, p.vllm_args)
    assert "--speculative-config" in render.argv(r.vllm_args)
    assert p.resolve("replay").model == "org/big"  # our stacks have no override key


def test_aca_override_read_as_azure(tmp_path):
    p = load_preset_file(preset_file(tmp_path, "merge", MERGE))
    assert p.resolve("azure").model == "org/aca-model"
    assert p.resolve("aca").stack == "azure"


def test_azure_override_wins_over_aca(tmp_path):
    body = GOOD.format(name="p") + "stacks:\n  azure:\n    model: a/az\n  aca:\n    model: a/aca\n"
    assert load_preset_file(preset_file(tmp_path, "p", body)).resolve("azure").model == "a/az"


def test_served_name_defaults_to_name(tmp_path):
    p = load_preset_file(preset_file(tmp_path, "p", GOOD.format(name="p")))
    assert p.resolve("local-vllm").served_name == "p"
    p = load_preset_file(preset_file(tmp_path, "q", GOOD.format(name="q") + "served_model_name: qq\n"))
    assert p.resolve("local-vllm").served_name == "qq"


def test_sha256_and_path(tmp_path):
    import hashlib

    path = preset_file(tmp_path, "p", GOOD.format(name="p"))
    r = load_preset_file(path).resolve("local-vllm")
    assert r.path == path and r.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_missing_env(tmp_path, monkeypatch):
    r = load_preset_file(preset_file(tmp_path, "merge", MERGE)).resolve("azure")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert missing_env(r) == ["HF_TOKEN"]
    monkeypatch.setenv("HF_TOKEN", "x")
    assert missing_env(r) == []


# --- properties ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "max_len", "tools", "reasoning"),
    [
        ({"--max-model-len": 4096, "--enable-auto-tool-choice": True, "--tool-call-parser": "hermes"},
         4096, True, None),
        ({"--max-model-len": "8192", "--tool-call-parser": "hermes"}, 8192, False, None),
        ({"--enable-auto-tool-choice": True, "--tool-call-parser": ""}, None, False, None),
        ({"--enable-auto-tool-choice": "true", "--tool-call-parser": "x"}, None, False, None),
        ({"--max-model-len": "lots", "--reasoning-parser": "qwen3"}, None, False, "qwen3"),
        ({"--max-model-len": False, "--reasoning-parser": False}, None, False, None),
    ],
)
def test_properties(tmp_path, args, max_len, tools, reasoning):
    p = load_preset_file(preset_file(tmp_path, "p", GOOD.format(name="p")))
    r = p.resolve("local-vllm").model_copy(update={"vllm_args": args})
    assert (r.max_model_len, r.tool_calling, r.reasoning_parser) == (max_len, tools, reasoning)


def test_yaml_types_survive_loading(tmp_path):
    body = GOOD.format(name="p") + "vllm_args:\n  --a: true\n  --b: 8\n  --c: 0.9\n  --d: '8'\n"
    args = load_preset_file(preset_file(tmp_path, "p", body)).vllm_args
    assert args == {"--a": True, "--b": 8, "--c": 0.9, "--d": "8"}
    assert [type(v) for v in args.values()] == [bool, int, float, str]


# --- render --------------------------------------------------------------------

SPEC = '{"method": "mtp", "num_speculative_tokens": 3}'
ARGS = {
    "--max-model-len": 262144,
    "--gpu-memory-utilization": 0.92,
    "--enable-prefix-caching": True,
    "--language-model-only": False,
    "--speculative-config": SPEC,
    "--chat-template": "it's {{ x }}",
}


def test_argv():
    assert render.argv(ARGS) == [
        "--max-model-len", "262144",
        "--gpu-memory-utilization", "0.92",
        "--enable-prefix-caching",
        "--speculative-config", SPEC,
        "--chat-template", "it's {{ x }}",
    ]


def test_shell_line_quotes_every_value():
    line = render.shell_line(ARGS)
    assert line.startswith("--max-model-len '262144' --gpu-memory-utilization '0.92' --enable-prefix-caching ")
    assert "'it'\\''s {{ x }}'" in line
    assert "--language-model-only" not in line
    assert shlex.split(line) == render.argv(ARGS)  # a shell reads back exactly argv


def test_json_array_keeps_json_values_intact():
    array = json.loads(render.json_array(ARGS))
    assert all(isinstance(x, str) for x in array)
    assert array == render.argv(ARGS)
    spec = array[array.index("--speculative-config") + 1]
    assert json.loads(spec) == {"method": "mtp", "num_speculative_tokens": 3}


def test_quoted_number_is_refused_with_fix(tmp_path):
    err = refuse(preset_file(tmp_path, "p", GOOD.format(name="p") + 'gpu_memory_gb: "16"\n'))
    assert (err.field, err.message, err.fix) == ("gpu_memory_gb", "must be a number, not a string",
                                                 "write 16 without quotes")


def test_the_shipped_gpu_cloud_environment_carries_its_price_and_where_it_comes_from():
    """"At what GPU cost?": the Azure A100 environment prices its GPU-hours, and its source says
    what the figure is (a proxy, the VM of the same GPU) and when it was read."""
    env = load_environment_file(Path(__file__).parent.parent / ".vot" / "environments" / "azure-sweden.yaml")
    assert env.gpu_hourly_usd and 1 < env.gpu_hourly_usd < 20
    assert "proxy" in env.gpu_price_source and re.search(r"\d{4}-\d{2}-\d{2}", env.gpu_price_source)
