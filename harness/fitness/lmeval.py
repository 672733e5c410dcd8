"""Seed 003's lm-eval lane, offline: `lm-eval[api]` (pinned) in a venv of its own, task
definitions written over the frozen subsets `fitness data` extracted (never a hub dataset),
run against the served model's `/v1/completions` (no chat template, greedy, one request at a
time, as the seed runs it). The harness never imports lm-eval: `lmeval_driver.py` runs in the
tools venv, JSON in and out, the served key passed by the name of its variable.

    llms-benchmark fitness tools            # once, online (PyPI): the tools venv (~760 MB, no torch)
    capability.lmeval: true                 # in a fitness YAML: the capability phase runs it too

What runs offline, and what does not (measured, see README "The seed's tools"): GSM8K has a
task definition here; lm-eval's own IFEval, HumanEval and MATH-500 tasks read hub datasets and
fetch their scorers (NLTK punkt_tab, `evaluate.load("code_eval")`) at import, so those suites
stay with the capability phase's own scorers (`OFFLINE_WHY`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from harness.errors import UserError
from harness.fitness import data

LM_EVAL = "lm-eval[api]==0.4.13"  # PyPI's newest (2026-12-03); its core pulls no torch (hf is an extra)
REQUIREMENTS = (LM_EVAL,)
DRIVER = Path(__file__).with_name("lmeval_driver.py")
STAMP = ".llms-benchmark-tools.json"
SETUP_TIMEOUT_S = 900

# suite -> the lm-eval task written over its frozen file (the upstream gsm8k.yaml's prompt, stop
# list and flexible-extract filter; zero-shot: no train split is shipped)
TASKS: dict[str, dict[str, Any]] = {
    "gsm8k": {
        "task": "fitness_gsm8k",
        "dataset_path": "json",
        "output_type": "generate_until",
        "test_split": "test",
        "doc_to_text": "Question: {{prompt}}\nAnswer:",
        "doc_to_target": "{{expected}}",
        "num_fewshot": 0,
        "generation_kwargs": {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0},
        "filter_list": [{"name": "flexible-extract", "filter": [
            {"function": "regex", "group_select": -1, "regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)"},
            {"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False,
                         "regexes_to_ignore": [",", r"\$", r"\.$"]}],
        "metadata": {"version": 1.0},
    },
}
# the frozen suites lm-eval cannot score here, and why (measured in the tools venv, offline)
OFFLINE_WHY = {
    "humaneval": "lm-eval's humaneval task reads openai/openai_humaneval from the hub and scores with "
                 "evaluate.load('code_eval'), a metric script fetched from the hub when the task loads (offline: "
                 "\"Couldn't find a module script ... code_eval.py\"); the capability phase runs HumanEval sandboxed",
    "ifbench": "lm-eval ships IFEval (google/IFEval, from the hub), not IFBench: its registry lacks IFBench's "
               "instruction ids, it needs lm-eval's `ifeval` extra (langdetect) and downloads NLTK's punkt_tab "
               "when imported; the capability phase scores IFBench with if-verifiable's checkers",
}


def default_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llms-benchmark" / "fitness-tools"


def _pin_hash() -> str:
    return hashlib.sha256("\n".join(REQUIREMENTS).encode()).hexdigest()


def _python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def ready(venv: Path) -> bool:
    try:
        return _python(venv).is_file() and json.loads((Path(venv) / STAMP).read_text()).get("pins") == _pin_hash()
    except (OSError, ValueError):
        return False


def require(venv: Path, field: str = "capability.lmeval") -> Path:
    if not ready(venv):
        raise UserError(f"the fitness tools' venv (lm-eval) is missing or out of date ({venv})", field=field,
                        fix=f"run `llms-benchmark fitness tools` once (installs {LM_EVAL} from PyPI into its own "
                            "venv), or set capability.lmeval: false")
    return _python(venv)


def prepare(venv: Path, say=print) -> dict[str, Any]:
    """Make the tools venv (idempotent), then the torch guardrail over it."""
    venv = Path(venv)
    if ready(venv):
        say(f"tools: {venv} (ready)")
        return versions(venv)
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
            raise UserError("exists and is not a venv: refusing to replace it", file=venv, field="--tools-venv",
                            fix="point --tools-venv at a new folder (or delete this one yourself)")
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--prefer-binary", *REQUIREMENTS],  # sqlitedict, word2number, rouge-score: sdists only
             [sys.executable, "-m", "harness.fitness.guard", "--python", str(_python(venv))]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            said = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "ignored: it is neither" not in ln]
            raise UserError(f"making the tools' venv failed ({' '.join(cmd[1:4])}): "
                            f"{' '.join(said).strip()[-500:]}", field="tools",
                            fix="check that PyPI is reachable (pip's own configuration applies), then run it again")
    info = _call(_python(venv), "versions", {}, timeout_s=120)
    (venv / STAMP).write_text(json.dumps({"pins": _pin_hash(), "requirements": list(REQUIREMENTS), **info}) + "\n")
    say(f"tools: {venv} (lm-eval {info.get('lm_eval')})")
    return info


def versions(venv: Path) -> dict[str, Any]:
    try:
        doc = json.loads((Path(venv) / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in doc.items() if k != "pins"}


def write_tasks(data_dir: Path, folder: Path, suites: list[str]) -> dict[str, str]:
    """The lm-eval task YAMLs over the frozen files (each verified first): {suite: task name}."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for suite in suites:
        if suite not in TASKS:
            continue
        spec = dict(TASKS[suite])
        spec["dataset_kwargs"] = {"data_files": {"test": str(data.verify(data_dir, suite))}}
        (folder / f"{spec['task']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        names[suite] = spec["task"]
    return names


def _call(python: Path, op: str, payload: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None,
          ) -> dict[str, Any]:
    base = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        proc = subprocess.run([str(python), "-I", str(DRIVER), op], input=json.dumps(payload), capture_output=True,
                              text=True, timeout=timeout_s, env={**base, **(env or {})}, stdin=None)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"lm-eval ({op}) ran past {timeout_s:.0f}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"lm-eval ({op}) failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


def run(base_url: str, model: str, suites: list[str], *, data_dir: Path, venv: Path, work_dir: Path,
        limit: int = 0, max_tokens: int = 256, seed: int = 0, api_key: str | None = None,
        timeout_s: float = 3600) -> dict[str, Any]:
    """lm-eval over the suites it has a task for: {suite: {accuracy, n, metrics}}, `skipped` with why,
    the tool's versions. Its hub cache is a folder of the run (nothing read from or written to ~)."""
    python = require(venv)
    tasks = write_tasks(data_dir, work_dir / "tasks", suites)
    skipped = {s: OFFLINE_WHY.get(s, "no lm-eval task defined") for s in suites if s not in tasks}
    if not tasks:
        return {"suites": {}, "skipped": skipped, "versions": versions(venv)}
    env = {"HF_HOME": str(work_dir / "hf"), "XDG_CACHE_HOME": str(work_dir / "cache")}
    key_env = None
    if api_key:  # to the driver's environment only (never argv, never a file)
        key_env = "LLMS_BENCHMARK_LMEVAL_KEY"
        env[key_env] = api_key
    doc = _call(python, "run", {"base_url": base_url, "model": model, "tasks": list(tasks.values()),
                                "include_path": str(work_dir / "tasks"), "limit": limit, "max_tokens": max_tokens,
                                "seed": seed, "key_env": key_env, "timeout_s": min(timeout_s, 900)},
                timeout_s=timeout_s, env=env)
    out = {}
    for suite, task in tasks.items():
        got = doc["tasks"].get(task) or {}
        metrics = got.get("metrics", {})
        acc = next((v for k, v in metrics.items() if k.startswith("exact_match,")), None)
        out[suite] = {"accuracy": acc, "n": got.get("n", 0), "task": task, "metrics": metrics}
        (work_dir / f"{task}.samples.jsonl").write_text(
            "".join(json.dumps(s) + "\n" for s in got.get("samples", [])))
    return {"suites": out, "skipped": skipped, "versions": doc.get("versions", {})}
