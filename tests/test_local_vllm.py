"""The local-vllm stack driven through stand-in `vllm` and `nvidia-smi` executables on
PATH: the exact `vllm serve` argv, readiness on /v1/models (the stand-in execs the
replay server, a real OpenAI-compatible endpoint), a fatal start destroyed at once, an
option vLLM does not take ending the unit with vLLM's own line, and the missing-vllm refusal."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path, fatal: bool) -> tuple[Path, dict]:
    root = tmp_path / "proj"
    (root / ".vot" / "environments").mkdir(parents=True)
    (root / ".vot" / "presets").mkdir(parents=True)
    (root / "replay").mkdir()
    shutil.copytree(ROOT / "missions" / "hello", root / "missions" / "hello")
    with socket.socket() as s:  # vLLM stacks take a fixed port (8000 by default): pick a free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / ".vot" / "environments" / "local-gpu.yaml").write_text(
        f"name: local-gpu\nstack: local-vllm\nconfig:\n  port: {port}\n")
    for name in ("odd-qwen3-8-27b.yaml",):
        (root / ".vot" / "presets" / name).write_text((ROOT / ".vot" / "presets" / name).read_text())
    (root / "replay" / "empty.yaml").write_text("trajectories: []\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_file = tmp_path / "vllm-argv.json"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA A100-SXM4-80GB, 81920'\n")
    body = f"""\
        #!{sys.executable}
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT / "tests" / "fakes")!r})
        from standins import USAGE, engine_failure, engine_started, parse_error
        json.dump(sys.argv[1:], open({str(argv_file)!r}, "w"))
        args = sys.argv[1:]
        if error := parse_error(args[2:]):  # as the real vllm serve 0.32: argparse's line, exit 2
            sys.stderr.write(USAGE + error + "\\n")
            sys.exit(2)
        if {fatal!r}:  # as the real vLLM 0.32: the engine's failure, then exit 1
            engine_failure(lambda line: print(line, flush=True))
            sys.exit(1)
        port, served = args[args.index("--port") + 1], args[args.index("--served-model-name") + 1]
        engine_started(lambda line: print(line, flush=True), args[args.index("--max-model-len") + 1])
        os.execv(sys.executable, [sys.executable, "-m", "harness.replay.server", "--trajectory",
                 {str(root / "replay" / "empty.yaml")!r}, "--port", port, "--served-model-name", served,
                 "--max-model-len", "262144"])
    """
    (bin_dir / "vllm").write_text(textwrap.dedent(body))
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LLMS_BENCHMARK_ROOT": str(root),
           "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    return root, {"env": env, "argv_file": argv_file}


def _cli(args, env, timeout=120):
    proc = subprocess.run([str(Path(sys.executable).parent / "llms-benchmark"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def test_serve_renders_vllm_argv_and_waits_for_models(tmp_path):
    root, ctx = _project(tmp_path, fatal=False)
    code, out, err = _cli(["preflight", "local-gpu", "odd-qwen3-8-27b", "--mission", "hello", "--json"], ctx["env"])
    assert code == 0, err
    assert json.loads(out)["gpu"] == "A100-SXM4-80GB 80 GB"
    code, out, err = _cli(["serve", "local-gpu", "odd-qwen3-8-27b", "--json"], ctx["env"])
    try:
        assert code == 0, err
        argv = json.loads(ctx["argv_file"].read_text())
        assert argv[:2] == ["serve", "Qwen/Qwen3.8-27B-FP8"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
        assert argv[argv.index("--served-model-name") + 1] == "qwen3.8-27b"
        spec = argv[argv.index("--speculative-config") + 1]
        assert json.loads(spec) == {"method": "mtp", "num_speculative_tokens": 3}  # one argv item, intact
        assert "--enable-auto-tool-choice" in argv and argv[argv.index("--max-model-len") + 1] == "262144"
        assert (root / ".vot" / "run" / "vot-odd-qwen3-8-27b.pid").is_file()
        log = (root / ".vot" / "run" / "vot-odd-qwen3-8-27b.log").read_text()
        # What the record's serving section takes from that log (a GPU vLLM's KV lines).
        from harness.stacks.local_vllm import LocalVllmStack
        from harness.vot.environment import load_environment
        from harness.vot.preset import load_preset
        env = load_environment(root, "local-gpu")
        facts = LocalVllmStack(root).describe(None, env, load_preset(root, "odd-qwen3-8-27b").resolve(env.stack), log)
        assert facts == {"kv_cache_tokens": "514752", "kv_cache_device": "GPU", "kv_cache_gib": "31.42",
                         "kv_max_concurrency": "1.96x at 262144 tokens per request"}, facts
    finally:
        code, out, err = _cli(["destroy", "local-gpu", "odd-qwen3-8-27b"], ctx["env"])
    assert code == 0 and "destroyed vot-odd-qwen3-8-27b" in out, err
    assert json.loads((root / ".vot" / "run" / "units.json").read_text()) == {}
    assert not (root / ".vot" / "run" / "vot-odd-qwen3-8-27b.pid").exists()


def test_fatal_engine_start_is_destroyed_at_once(tmp_path):
    root, ctx = _project(tmp_path, fatal=True)
    started = time.monotonic()
    code, out, err = _cli(["serve", "local-gpu", "odd-qwen3-8-27b"], ctx["env"])
    assert code == 3, (out, err)
    assert time.monotonic() - started < 30  # not the 15-minute readiness bound
    flat = " ".join(err.split())
    assert "EngineCore failed to start" in flat and "destroyed" in flat
    assert "Traceback" not in err
    assert json.loads((root / ".vot" / "run" / "units.json").read_text()) == {}


def test_an_option_vllm_does_not_take_ends_the_unit_with_its_line(tmp_path):
    """The stand-in parses options as the real `vllm serve` 0.32 does (its list read from the real
    one): a preset flag it does not know exits 2 at once, and that line is what the user reads."""
    root, ctx = _project(tmp_path, fatal=False)
    preset = root / ".vot" / "presets" / "odd-qwen3-8-27b.yaml"
    preset.write_text(preset.read_text().replace("vllm_args:\n", "vllm_args:\n  --max-num-seqs-per-gpu: 8\n", 1))
    started = time.monotonic()
    code, out, err = _cli(["serve", "local-gpu", "odd-qwen3-8-27b"], ctx["env"])
    assert code == 3, (out, err)
    assert time.monotonic() - started < 30
    flat = " ".join(err.split())
    assert "vllm: error: unrecognized arguments: --max-num-seqs-per-gpu 8" in flat and "destroyed" in flat, flat
    assert "Traceback" not in err
    assert json.loads((root / ".vot" / "run" / "units.json").read_text()) == {}


def test_missing_vllm_is_refused_clearly(tmp_path):
    root, ctx = _project(tmp_path, fatal=False)
    (tmp_path / "bin" / "vllm").unlink()
    env = {**ctx["env"], "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    code, out, err = _cli(["preflight", "local-gpu", "odd-qwen3-8-27b", "--mission", "hello"], env)
    assert code == 2
    flat = " ".join(err.split())
    assert "local-gpu.yaml" in flat and "`vllm` is not installed" in flat and "fix:" in flat
