"""`llms-benchmark fitness serve`: the HTTP API as a real uvicorn process on loopback, its runs
real `fitness run` processes serving replay units: 401 without the token, 202 and a status
URL, 409 on a second run, cancel ends the run and destroys its unit, the report once done,
and a client that disconnects from the blocking variant cancels its run."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from conftest import REPO, marker_processes_under

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
TOKEN = "fitness-test-token-3f9a"
# the seed's webhook schema, then ours beside it
SEED_KEYS = {"run_id", "tag", "finished_utc", "verdict_per_model", "exit_code", "summary", "report_path",
             "kl_divergence", "vram_baseline", "text"}
SUMMARY_KEYS = SEED_KEYS | {"verdict", "vram_baseline_reason", "phases", "errors", "retries", "regressions"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Api:
    def __init__(self, project, runs_dir: Path) -> None:
        env = {**project.env, "FIT_API_TOKEN": TOKEN}
        self.proc = subprocess.Popen([str(CLI), "fitness", "serve", "--port", "0", "--token-env", "FIT_API_TOKEN",
                                      "--runs-dir", str(runs_dir)], cwd=project.root, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        line = ""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stderr, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while "http://" not in line and time.monotonic() < deadline:
                if sel.select(timeout=1):
                    line += self.proc.stderr.readline()
        self.url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def api(project, tmp_path: Path):
    project.add_trajectory("fitness", REPO / "replay" / "fitness.yaml")
    project.add_preset("replay-fitness", trajectory="fitness")
    project.add_trajectory("fitness-broken")
    project.add_preset("replay-stall", trajectory="fitness-broken")  # its warm-up request stalls 120 s
    server = Api(project, tmp_path / "api-runs")
    yield server
    server.stop()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def test_token_conflict_cancel_and_report(api, project) -> None:
    assert httpx.get(f"{api.url}/api/health").json() == {"status": "ok", "active_run": None}
    stall = {"target": ["replay", "replay-stall"], "phases": ["warmup"]}
    assert httpx.post(f"{api.url}/api/runs", json=stall).status_code == 401
    assert httpx.post(f"{api.url}/api/runs", json=stall, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{api.url}/api/runs").status_code == 401

    r = httpx.post(f"{api.url}/api/runs", json=stall, headers=AUTH)
    assert r.status_code == 202, r.text
    run_id, status_url = r.json()["run_id"], r.json()["status_url"]
    assert status_url == f"{api.url}/api/runs/{run_id}"
    # the unit is served (in the ledger, its process alive) and the run is stuck in its warm-up
    wait_for(lambda: marker_processes_under(project.root), 30, "the replay unit to start")
    assert httpx.get(status_url, headers=AUTH).json()["status"] == "running"
    assert list(project.ledger()) == ["replay/vot-replay-stall"]
    assert httpx.get(f"{api.url}/api/health").json()["active_run"] == run_id

    second = httpx.post(f"{api.url}/api/runs", json={"target": ["replay", "replay-fitness"]}, headers=AUTH)
    assert second.status_code == 409 and run_id in second.text
    assert httpx.get(f"{status_url}/report", headers=AUTH).status_code == 404

    cancelled = httpx.post(f"{status_url}/cancel", headers=AUTH, timeout=90)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["exit_code"] == 3
    wait_for(lambda: not marker_processes_under(project.root), 15, "the unit's process to end")
    assert project.ledger() == {}  # destroyed: out of the ledger
    assert "destroyed vot-replay-stall" in " ".join((Path(cancelled.json()["report_dir"]) / "run.log")
                                                    .read_text().split())

    # the next run is accepted, finishes, and has its report
    quick = httpx.post(f"{api.url}/api/runs", json={"target": ["replay", "replay-fitness"], "phases": "tooluse"},
                       headers=AUTH)
    assert quick.status_code == 202, quick.text
    url = quick.json()["status_url"]
    done = wait_for(lambda: (s := httpx.get(url, headers=AUTH).json())["status"] not in ("running",) and s, 60,
                    "the second run to finish")
    assert done["status"] == "passed" and done["exit_code"] == 0
    report = httpx.get(f"{url}/report", headers=AUTH).json()
    assert set(report) == SUMMARY_KEYS and report["verdict_per_model"] == {"replay-fitness": "PASS"}
    assert report["summary"][0]["tooluse"]["wellformed_rate"] == 1.0
    listing = httpx.get(f"{api.url}/api/runs", headers=AUTH).json()["runs"]
    assert [x["status"] for x in listing] == ["cancelled", "passed"]


def test_a_client_that_disconnects_from_the_blocking_variant_cancels_the_run(api, project) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{api.url}/api/bench", json={"target": ["replay", "replay-stall"], "phases": "warmup"},
                   headers=AUTH, timeout=httpx.Timeout(10, read=6))
    # the client has gone: the server notices, cancels the run, and its unit is destroyed
    wait_for(lambda: httpx.get(f"{api.url}/api/health").json()["active_run"] is None, 60, "the run to be cancelled")
    runs = httpx.get(f"{api.url}/api/runs", headers=AUTH).json()["runs"]
    assert [x["status"] for x in runs] == ["cancelled"]
    wait_for(lambda: not marker_processes_under(project.root), 15, "the unit's process to end")
    assert project.ledger() == {}


def test_requests_are_checked_before_the_202_and_pipeline_true_runs_everything(api, project, tmp_path: Path) -> None:
    target = ["replay", "replay-fitness"]
    for body, needle in [
        ({"target": target, "phases": "warmup,perf"}, "unknown phase 'perf'"),
        ({"target": target, "phases": ["warmup", "speed"]}, "unknown phase 'speed'"),
        ({"target": target, "pipeline": True, "phases": "warmup"}, '\\"pipeline\\": true runs every phase'),
        ({"target": target, "config": str(tmp_path / "missing.yaml")}, "missing.yaml"),
    ]:
        r = httpx.post(f"{api.url}/api/runs", json=body, headers=AUTH)
        assert r.status_code == 422 and needle in r.text, r.text
    assert "the seed's 'perf' is throughput here" in httpx.post(
        f"{api.url}/api/runs", json={"target": target, "phases": "perf"}, headers=AUTH).text
    assert httpx.get(f"{api.url}/api/runs", headers=AUTH).json()["runs"] == []  # nothing was started
    # "pipeline": true is accepted: every phase; cancelled at once, it still leaves its report
    r = httpx.post(f"{api.url}/api/runs", json={"target": target, "pipeline": True}, headers=AUTH)
    assert r.status_code == 202, r.text
    url = r.json()["status_url"]
    wait_for(lambda: marker_processes_under(project.root), 30, "the replay unit to start")
    cancelled = httpx.post(f"{url}/cancel", headers=AUTH, timeout=90).json()
    assert cancelled["status"] == "cancelled" and cancelled["exit_code"] == 3
    report = httpx.get(f"{url}/report", headers=AUTH).json()
    assert set(report) == SUMMARY_KEYS and report["exit_code"] == 3
    assert list(report["phases"]) == ["telemetry", "warmup", "tooluse", "throughput", "capacity", "capability",
                                      "kl", "judge"]
    wait_for(lambda: not marker_processes_under(project.root), 15, "the unit's process to end")


def test_no_token_means_loopback_only(tmp_path: Path) -> None:
    r = subprocess.run([str(CLI), "fitness", "serve", "--host", "0.0.0.0", "--port", "0"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL,
                       env={**os.environ, "COLUMNS": "300"})
    assert r.returncode == 3 and "refusing to serve the API on 0.0.0.0 without a token" in " ".join(r.stderr.split())
