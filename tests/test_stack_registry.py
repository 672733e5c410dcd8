"""A stack is declared once (its spec in harness/stack_specs/catalog.py); the registry, the environment
schema, ports and preset overrides follow from the declarations."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.stack_specs import catalog
from harness.stacks import registry
from harness.vot.loader import SCHEMA_DIR, load_schema, schema_errors

REPO = Path(__file__).resolve().parents[1]


def test_schema_stack_enum_is_the_registry():
    enum = load_schema("environment")["properties"]["stack"]["enum"]
    assert enum == ["local-vllm", "local-vllm-metal", "local-vllm-docker", "azure", "aca", "local-llamacpp", "replay"]
    assert [catalog.canonical(n) for n in enum] == [
        "local-vllm", "local-vllm-metal", "local-vllm-docker", "azure", "azure", "local-llamacpp", "replay"]
    # The file itself names no stack: a second list could drift from the declarations.
    assert "enum" not in json.loads((SCHEMA_DIR / "environment.schema.json").read_text())["properties"]["stack"]


@pytest.mark.parametrize("spec", catalog.SPECS, ids=lambda s: s.name)
def test_each_spec_names_its_own_implementation(spec):
    module, _, cls = spec.implementation.partition(":")
    stack_cls = getattr(importlib.import_module(module), cls)
    assert stack_cls.name == spec.name


def test_the_catalog_the_schema_reads_imports_neither_the_stacks_nor_the_schema():
    """The stacks import harness.vot; harness.vot reads the catalog: were the catalog to import a
    stack module (or harness.vot), the two packages would import each other again."""
    code = ("import sys, harness.stack_specs.catalog; "
            "print(sorted(m for m in sys.modules if m.startswith(('harness.vot', 'harness.stacks'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["[]"]
    # The registry still loads the stack itself, and only when asked.
    assert registry.get_stack("replay", REPO).name == "replay"


def _imports(package: str) -> dict[str, set[str]]:
    """Every module each file of `package` imports, at the top or inside a function."""
    import ast

    found = {}
    for path in sorted((REPO / "harness" / package).glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        found[path.name] = names
    return found


def test_no_circle_between_the_schema_and_the_stacks_not_even_inside_a_function():
    """Issue 49: harness.vot read the catalog from inside functions while the stacks import harness.vot."""
    for name, names in _imports("vot").items():
        assert not [n for n in names if n.startswith("harness.stacks")], name
    for name, names in _imports("stack_specs").items():
        assert not [n for n in names if n.startswith(("harness.stacks", "harness.vot"))], name


def test_preset_override_stacks_match_the_preset_schema():
    """preset.schema.json is vllm-on-tap's own file; the stacks it lets a preset override are
    the ones declared `preset_override` (plus azure's old name)."""
    allowed = set(json.loads((SCHEMA_DIR / "preset.schema.json").read_text())["properties"]["stacks"]["properties"])
    assert allowed == {*catalog.override_stacks(), "aca"}


def test_a_stack_config_is_checked_by_its_own_declaration():
    base = {"name": "x", "stack": "local-llamacpp"}
    assert schema_errors({**base, "config": {"threads": 2, "port": 0}}, "environment") == []
    assert schema_errors({**base, "config": {"image": "x"}}, "environment")  # a docker key on llama.cpp
    assert schema_errors({"name": "x", "stack": "local-vllm", "config": {"port": 0}}, "environment")  # vLLM: 1..65535
    assert schema_errors({"name": "x", "stack": "aca", "config": {"storage": "old"}}, "environment") == []


def test_ports_and_dropped_keys_come_from_the_spec(tmp_path):
    from harness.vot.environment import load_environment_file

    envs = tmp_path / ".vot" / "environments"
    envs.mkdir(parents=True)
    (envs / "a.yaml").write_text("name: a\nstack: aca\nconfig: {subscription: s, storage: old}\n")
    (envs / "b.yaml").write_text("name: b\nstack: local-llamacpp\n")
    a = load_environment_file(envs / "a.yaml")
    assert (a.stack, a.was_aca, a.port, a.config) == ("azure", True, 8000, {"subscription": "s"})
    assert load_environment_file(envs / "b.yaml").port == 0


def test_unknown_stack_names_the_known_ones():
    with pytest.raises(UserError) as err:
        registry.get_stack("k8s", REPO)
    assert "local-llamacpp" in err.value.render() and "replay" in err.value.render()
