"""Runs lm-eval inside the fitness tools' venv (never imported by the harness): JSON in on
stdin, JSON out on stdout. The served model's key comes from the environment variable the
payload names (never argv); the task definitions are the YAML files in `include_path`.

    <tools-venv>/bin/python -I lmeval_driver.py versions
    <tools-venv>/bin/python -I lmeval_driver.py run   < {"base_url", "model", "tasks", "include_path", ...}
"""

import json
import logging
import os
import sys


def versions() -> dict:
    from importlib import metadata

    return {name: metadata.version(name) for name in ("lm_eval", "datasets", "evaluate")}


def run(p: dict) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    logging.disable(logging.WARNING)
    key = os.environ.get(p.get("key_env") or "", "")
    model_args = {"base_url": p["base_url"].rstrip("/") + "/completions", "model": p["model"],
                  "tokenizer_backend": None, "tokenized_requests": False, "num_concurrent": 1,
                  "max_retries": int(p.get("max_retries", 3)), "timeout": int(p.get("timeout_s", 300)),
                  "max_gen_toks": int(p.get("max_tokens", 256)), "seed": int(p.get("seed", 1234)),
                  "header": {"Authorization": f"Bearer {key}"} if key else {}}
    out = lm_eval.simple_evaluate(model="local-completions", model_args=model_args, tasks=p["tasks"],
                                  task_manager=TaskManager(include_path=p["include_path"]),
                                  limit=p.get("limit") or None, log_samples=True, random_seed=int(p.get("seed", 0)),
                                  numpy_random_seed=int(p.get("seed", 0)), bootstrap_iters=0)
    tasks = {}
    for task, res in out["results"].items():
        metrics = {k: v for k, v in res.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        samples = out.get("samples", {}).get(task, [])
        tasks[task] = {"metrics": metrics, "n": len(samples),
                       "samples": [{"doc_id": s.get("doc_id"), "target": s.get("target"),
                                    "response": (s.get("resps") or [[""]])[0][0] if s.get("resps") else "",
                                    "filtered": (s.get("filtered_resps") or [""])[0],
                                    "exact_match": s.get("exact_match")} for s in samples]}
    return {"tasks": tasks, "versions": versions()}


def main() -> int:
    op = sys.argv[1] if len(sys.argv) > 1 else ""
    real, sys.stdout = sys.stdout, sys.stderr  # lm-eval prints: only our JSON goes to stdout
    if op == "versions":
        doc = versions()
    elif op == "run":
        doc = run(json.loads(sys.stdin.read()))
    else:
        print(f"unknown operation {op!r}", file=sys.stderr)
        return 2
    real.write(json.dumps(doc, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
