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

import json
from pathlib import Path
from typing import Any

import yaml

from harness.fitness import data
from harness.fitness.toolvenv import PinnedVenv

LM_EVAL = "lm-eval[api]==0.4.13"  # PyPI's newest (2026-12-03); its core pulls no torch (hf is an extra)
REQUIREMENTS = (LM_EVAL,)
VENV = PinnedVenv(
    name="the fitness tools' venv (lm-eval)", tool="lm-eval", requirements=REQUIREMENTS,
    stamp=".llms-benchmark-tools.json", cache_name="fitness-tools", driver=Path(__file__).with_name("lmeval_driver.py"),
    make=f"run `llms-benchmark fitness tools` once (installs {LM_EVAL} from PyPI into its own venv)",
    turn_off="set capability.lmeval: false", prepare_field="--tools-venv",
    pip_options=("--prefer-binary",),  # sqlitedict, word2number, rouge-score: sdists only
    guard=True, setup_timeout_s=900, versions_timeout_s=120,
    env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
         "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"},
)
default_dir, ready, versions = VENV.default_dir, VENV.ready, VENV.versions


def require(venv: Path, field: str = "capability.lmeval") -> Path:
    return VENV.require(venv, field)


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


def prepare(venv: Path, say=print) -> dict[str, Any]:
    """Make the tools venv (idempotent), then the torch guardrail over it."""
    info = VENV.prepare(venv, say)
    if info is None:
        say(f"tools: {venv} (ready)")
        return versions(venv)
    say(f"tools: {venv} (lm-eval {info.get('lm_eval')})")
    return info


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
    doc = VENV.call(python, "run", {"base_url": base_url, "model": model, "tasks": list(tasks.values()),
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
