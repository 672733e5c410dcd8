"""The upstream checkers in their own lean venv (harness/fitness/checkers.py), made here from
PyPI exactly as `llms-benchmark fitness data` makes it:

- BFCL: every answerable item of the five categories, answered with its own ground truth,
  passes BFCL's AST checker; the same answers made wrong all fail; and the tooluse phase,
  end to end against replay servers scripted with right and with wrong calls, scores 1.0 and 0.0.
- IFBench: if-verifiable's checkers on hand-made answers to real IFBench items (right ones
  pass, wrong ones fail); the capability phase end to end on a replay server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, fitness_checkers_venv, fitness_data_dir
from test_fitness import Replay, bars, fitness, results

from harness.fitness import checkers, data
from harness.fitness.config import BFCL_CATEGORIES


@pytest.fixture(scope="module")
def venv() -> Path:
    folder = fitness_checkers_venv()
    info = checkers.versions(folder)
    assert info["bfcl-eval"] == "2026.3.23" and info["if-verifiable"] == "0.1.2"
    return folder


def call(venv: Path, op: str, payload: dict) -> dict:
    return checkers.call(checkers.require(venv, "test"), op, payload)


# -- BFCL --------------------------------------------------------------------------------------------
def first_option(args: dict) -> dict:
    """A call's arguments from BFCL's possible answers: each parameter's first accepted value
    (nested dicts likewise); "" means optional, so the parameter is left out."""
    out = {}
    for key, options in args.items():
        if not options or options[0] == "":
            continue
        value = options[0]
        out[key] = first_option(value) if isinstance(value, dict) else value
    return out


def right_calls(item: dict) -> list[dict]:
    if item["ground_truth"] is None:
        return []  # irrelevance: calling nothing is right
    return [{"name": name.replace(".", "_"), "arguments": json.dumps(first_option(args))}
            for call in item["ground_truth"] for name, args in call.items()]


def wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return "zz-" + value
    if isinstance(value, list):
        return value + ["zz-extra"]
    return {"zz": 1}


def wrong_calls(item: dict) -> list[dict]:
    if item["ground_truth"] is None:  # irrelevance: any call is wrong
        fn = item["tools"][0]["function"]
        return [{"name": fn["name"], "arguments": "{}"}]
    calls = [dict(c) for c in right_calls(item)]
    first = calls[0]
    args = json.loads(first["arguments"])
    if args:
        key = next(iter(args))
        args[key] = wrong(args[key])
        first["arguments"] = json.dumps(args)
    else:
        first["name"] += "_zz"
    return calls


def test_bfcl_ground_truth_passes_and_wrong_answers_fail(venv: Path) -> None:
    subset = call(venv, "bfcl_items", {"categories": list(BFCL_CATEGORIES), "per_category": 0})
    items = subset["items"]
    assert len(items) == 400 + 200 + 200 + 200 + 240 - 4  # every answerable item
    right = call(venv, "bfcl_score", {"items": [{**i, "calls": right_calls(i)} for i in items]})["results"]
    assert [i["id"] for i, r in zip(items, right) if not r["valid"]] == []
    bad = call(venv, "bfcl_score", {"items": [{**i, "calls": wrong_calls(i)} for i in items]})["results"]
    assert [i["id"] for i, r in zip(items, bad) if r["valid"]] == []
    # malformed arguments are a failure, not a crash
    broken = call(venv, "bfcl_score", {"items": [{**items[0], "calls": [{"name": "x", "arguments": "{oops"}]}]})
    assert broken["results"][0]["valid"] is False and "decode" in broken["results"][0]["error_type"]


def bfcl_trajectory(tmp: Path, venv: Path, per: int, answer) -> Path:
    """The fitness trajectory (the six asks) plus one scenario per BFCL subset question."""
    doc = yaml.safe_load((REPO / "replay" / "fitness.yaml").read_text())
    subset = call(venv, "bfcl_items", {"categories": list(BFCL_CATEGORIES), "per_category": per})
    for item in subset["items"]:
        calls = answer(item)
        step = ({"tool_calls": [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]}
                if calls else {"text": "None of the given functions can do that."})
        doc["trajectories"].append({"name": item["id"], "match": item["messages"][-1]["content"], "steps": [step]})
    path = tmp / f"bfcl-{answer.__name__}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("answer, accuracy, code", [(right_calls, 1.0, 0), (wrong_calls, 0.0, 2)])
def test_the_tooluse_phase_scores_bfcl_end_to_end(venv: Path, tmp_path: Path, answer, accuracy, code) -> None:
    server = Replay(tmp_path, bfcl_trajectory(tmp_path, venv, 2, answer))
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"tooluse": {"bfcl": True, "bfcl_per_category": 2},
                                   "checkers_venv": str(venv)}))
    out = tmp_path / "report"
    try:
        r = fitness(["run", server.url, "--phases", "tooluse", "--config", str(cfg), "--report-dir", str(out),
                     "--thresholds", str(bars(tmp_path, "tooluse.bfcl_accuracy: {fail_below: 0.5}\n"))], tmp_path)
    finally:
        server.stop()
    assert r.returncode == code, r.stdout + r.stderr
    doc = results(out)
    bfcl = doc["phases"][0]["details"]["bfcl"]
    assert bfcl["n"] == 10 and bfcl["accuracy"] == accuracy and doc["metrics"]["tooluse.bfcl_accuracy"] == accuracy
    assert set(bfcl["by_category"]) == set(BFCL_CATEGORIES)
    assert len(doc["reproducibility"]["data_manifest"]["bfcl"]) == 9  # 5 question files + 4 answer files
    assert doc["reproducibility"]["checkers"]["bfcl-eval"] == "2026.3.23"
    assert "BFCL v4 subset" in (out / "report.md").read_text()
    assert len((out / "bfcl.jsonl").read_text().splitlines()) == 10


def test_bfcl_without_the_venv_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"tooluse": {"bfcl": True}, "checkers_venv": str(tmp_path / "none")}))
    r = fitness(["run", "http://127.0.0.1:9", "--phases", "tooluse", "--config", str(cfg), "--dry-run"], tmp_path)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    text = " ".join(r.stderr.split())
    assert "checkers' venv is missing" in text and "tooluse.bfcl" in text and "fitness data" in text


# -- IFBench -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ifbench_dir() -> Path:
    return fitness_data_dir(["ifbench"])


@pytest.fixture(scope="module")
def ifbench_items(ifbench_dir: Path) -> dict[str, dict]:
    folder = ifbench_dir
    return {item["key"]: item for item in data.load_items(folder, "ifbench")}


def first_with(items: dict, instruction: str) -> dict:
    return next(i for i in items.values() if i["instruction_id_list"] == [instruction])


KEYWORDS = ("kaleidoscope once, nebula nebula, whisper whisper whisper, labyrinth labyrinth labyrinth labyrinth "
            "labyrinth, paradox paradox paradox paradox paradox paradox paradox.")


def known_answers(items: dict) -> list[tuple[dict, str, bool]]:
    """(item, answer, should pass) on real IFBench items, each answer written to its instruction."""
    kw = items["0"]
    emoji_item = first_with(items, "format:emoji")
    quotes = first_with(items, "format:quotes")
    newline = first_with(items, "format:newline")
    return [
        (kw, KEYWORDS.replace("kaleidoscope once", "kaleidoscope"), True),
        (kw, "kaleidoscope nebula whisper labyrinth paradox", False),
        (emoji_item, " ".join(f"Sentence number {i} ends here 😀." for i in range(1, 6)), True),
        (emoji_item, "A plain answer. With two sentences and no emoji.", False),
        (quotes, "\"He said 'she said \"it is so\" quietly' aloud\"", True),
        (quotes, "No quotes at all here.", False),
        (newline, "\n".join(["One", "word", "a", "line"]), True),
        (newline, "Several words on one line here.", False),
    ]


def test_ifbench_checkers_on_known_answers(venv: Path, ifbench_items: dict) -> None:
    cases = known_answers(ifbench_items)
    got = call(venv, "ifbench_score", {"items": [{"prompt": i["prompt"], "response": a,
                                                   "instruction_id_list": i["instruction_id_list"],
                                                   "kwargs": i["kwargs"]} for i, a, _ in cases]})["results"]
    assert [r["error"] for r in got] == [None] * len(cases)
    assert [r["strict"] for r in got] == [ok for _, _, ok in cases], [(i["instruction_id_list"], r) for (i, _, _), r in
                                                                      zip(cases, got)]
    # an empty answer fails every instruction
    empty = call(venv, "ifbench_score", {"items": [{"prompt": "x", "response": "", "instruction_id_list":
                                                    ["format:emoji"], "kwargs": [{}]}]})["results"][0]
    assert empty["strict"] is False and empty["loose"] is False


def test_the_capability_phase_scores_ifbench_end_to_end(venv: Path, ifbench_dir: Path, ifbench_items: dict,
                                                        tmp_path: Path) -> None:
    """The first 4 scored prompts, served by a replay server: the first with a right answer;
    the phase's verdicts are the checkers' own; the NLTK-data prompts are left out, counted."""
    from harness.fitness.phases.capability import NEEDS_NLTK_DATA

    scored = [i for i in ifbench_items.values() if not NEEDS_NLTK_DATA & set(i["instruction_id_list"])][:4]
    assert scored[0]["key"] == "0"
    answers = [KEYWORDS.replace("kaleidoscope once", "kaleidoscope")] + ["A plain answer."] * 3
    trajectory = tmp_path / "ifbench.yaml"
    trajectory.write_text(yaml.safe_dump({"trajectories": [
        {"name": f"if{n}", "match": item["prompt"], "steps": [{"text": answer}]}
        for n, (item, answer) in enumerate(zip(scored, answers))]}))
    expected = call(venv, "ifbench_score", {"items": [{"prompt": i["prompt"], "response": a, "instruction_id_list":
                                                       i["instruction_id_list"], "kwargs": i["kwargs"]}
                                                      for i, a in zip(scored, answers)]})["results"]
    server = Replay(tmp_path, trajectory)
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"capability": {"data_dir": str(ifbench_dir), "suites": ["ifbench"]},
                                   "checkers_venv": str(venv)}))
    out = tmp_path / "report"
    try:
        r = fitness(["run", server.url, "--phases", "capability", "--limit", "4", "--config", str(cfg),
                     "--report-dir", str(out)], tmp_path)
    finally:
        server.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    suite = results(out)["phases"][0]["details"]["suites"]["ifbench"]
    lines = [json.loads(x) for x in Path(suite["transcripts"]).read_text().splitlines()]
    assert [x["correct"] for x in lines] == [e["strict"] for e in expected] and lines[0]["correct"] is True
    assert suite["n"] == 4 and suite["left_out"] == 29 and suite["checker_errors"] == 0
    assert results(out)["metrics"]["capability.ifbench_accuracy"] == suite["accuracy"] == sum(
        e["strict"] for e in expected) / 4


def test_a_folder_that_is_not_a_venv_is_never_replaced(tmp_path: Path) -> None:
    from harness.errors import UserError

    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(UserError, match="is not a venv"):
        checkers.prepare(tmp_path, say=lambda _m: None)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_the_example_config_loads() -> None:
    from harness.fitness.config import load_config

    cfg = load_config(REPO / "harness" / "fitness" / "fitness.example.yaml")
    assert cfg.judge.agreement_min == 0.75 and cfg.tooluse.bfcl_per_category == 10
    assert cfg.thresholds.name == "thresholds.yaml" and cfg.thresholds.is_file()
