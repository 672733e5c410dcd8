"""What the observability mission runs beside the agent: a fresh telemetry store
(its DuckDB file in the run folder, kept for rulings) and the shop stack exporting
to it. The launch calls start() before the agent runs and stop() whatever happens.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack import start_stack  # noqa: E402  (a sibling file, not a package)

from harness.extras import require_mission  # noqa: E402
from harness.mission_services import service_env  # noqa: E402
from harness.verdicts.drive_server import DriveServer  # noqa: E402
from harness.verdicts.drive_server import Refused as DriveRefused  # noqa: E402

STORE_START_TIMEOUT_S = 30
INGEST_TOKEN_ENV = "TELEMETRY_INGEST_TOKEN"  # harness.telemetry.receiver reads it


class MissionServices:
    """`env` is the agent's: the query-only endpoint, never the ingest token (only the
    services get it), so the agent can read the evidence but not write it; and the
    harness's drive endpoint (`obs drive`), never the drive's tag key."""

    def __init__(self, store: subprocess.Popen, store_url: str, query_url: str, stack, workspace: Path,
                 drive: DriveServer | None = None) -> None:
        self.store, self.store_url, self.query_url, self.stack = store, store_url, query_url, stack
        self.drive = drive
        obs = workspace / ".obs"
        self.env = {
            "OBS_URL": query_url,
            **({"OBS_DRIVE_URL": drive.url} if drive else {}),
            "OBS_LOG": str(obs / "calls.jsonl"),
            "OBS_SPILL_DIR": str(obs),
            **stack.env(),
            # `obs` and the scenario's Python live in the harness's environment.
            "PATH": str(Path(sys.executable).parent),
        }

    def stop(self) -> None:
        try:
            if self.drive is not None:
                self.drive.close()  # ends a drive under way before its targets go
            self.stack.stop()  # the services flush their telemetry as they shut down
        finally:
            _stop(self.store)


def _stop(proc: subprocess.Popen, grace_s: float = 20) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the store drains its queue and closes the DB
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_store(db: Path, log: Path, ingest_token: str | None = None) -> tuple[subprocess.Popen, str, str]:
    """(process, ingest URL, query-only URL). The token travels in the store's environment, never argv."""
    env = service_env()  # no cloud credential or key of the launch's reaches the store
    if ingest_token:
        env[INGEST_TOKEN_ENV] = ingest_token
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.telemetry.receiver", "--db", str(db), "--host", "127.0.0.1", "--port", "0",
         "--query-port", "0"],
        stdout=subprocess.PIPE, stderr=open(log, "wb"), stdin=subprocess.DEVNULL, text=True, start_new_session=True,
        env=env)
    deadline = time.monotonic() + STORE_START_TIMEOUT_S
    line, urls = "", {}
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        match = re.search(r"(listening|query endpoint) on (http://\S+)", line)
        if match:
            urls[match.group(1)] = match.group(2)
        if len(urls) == 2:
            return proc, urls["listening"], urls["query endpoint"]
    _stop(proc)
    raise RuntimeError(f"the telemetry store did not start (last line: {line!r}; log {log})")


def start(workspace: Path, run_dir: Path, src: Path | None = None) -> MissionServices:
    """`src`: the services' sources; the mission's own unless a control store is made (a copy
    with one defect fixed, `harness.verdicts.controls`)."""
    # The shop stack is the `observability` extra (requirements.txt beside mission.yaml): say so
    # before anything starts (a launch checked it at preflight; controls and `mission check` did not).
    require_mission("observability", Path(__file__).resolve().parents[1])
    token = secrets.token_urlsafe(32)  # in memory and in the services' environments only
    store, url, query_url = start_store(run_dir / "telemetry.duckdb", run_dir / "telemetry-store.log", token)
    try:
        stack = start_stack(url, run_dir / "stack", ingest_token=token, src=src)
    except BaseException:
        _stop(store)
        raise
    # The drive runs the mission's own scenario (a control's copy when `src` is given), never
    # the agent's workspace copy: it runs outside the sandbox.
    scenario_root = (src.parent if src is not None else Path(__file__).resolve().parents[1] / "workspace")
    try:
        drive = DriveServer(scenario_root, stack.env(), run_dir)
    except BaseException:
        stack.stop()
        _stop(store)
        raise
    return MissionServices(store, url, query_url, stack, workspace, drive)


SIGNAL_TABLES = {"traces": "spans", "metrics": "metrics", "logs": "logs", "profiles": "profiles"}
SERVICES = ("shop-api", "shop-mcp", "shop-agent")


def _selftest():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "key" / "selftest.py"
    spec = importlib.util.spec_from_file_location("observability_key_selftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(workspace: Path, run_dir: Path, duration: float) -> dict:
    """`llms-benchmark mission check observability`: start the store and the stack, drive
    the scenario, stop the stack (it flushes), then report what each signal holds per
    service and run the key's self-test against that data."""
    import httpx
    import yaml

    services = start(workspace, run_dir)
    try:
        try:  # the harness's drive, as `obs drive` runs it in a launch
            services.drive.drive({"duration": duration, "vus": 5})
            drive = {"exit_code": 0, "stderr_tail": ""}
        except DriveRefused as exc:
            drive = {"exit_code": 1, "stderr_tail": str(exc)[-1000:]}
        services.drive.close()
        services.stack.stop()
        found: dict[str, dict[str, int]] = {}
        for signal_name, table in SIGNAL_TABLES.items():
            resp = httpx.post(f"{services.store_url}/query", timeout=60,
                              json={"sql": f"SELECT service, count(*) FROM {table} GROUP BY service"})
            resp.raise_for_status()
            counts = dict(resp.json()["rows"])
            found[signal_name] = {s: int(counts.get(s, 0)) for s in SERVICES}
        selftest = _selftest()
        defects = yaml.safe_load(selftest.KEY.read_text())["defects"]
        evidence = selftest.run_evidence(services.store_url, defects)
        hits = selftest.scan_workspace(selftest.key_words(defects))
    finally:
        services.stop()
    complete = all(n > 0 for per in found.values() for n in per.values())
    return {
        "drive": drive,
        "signals": found,
        "defects": evidence,
        "workspace_hits": hits,
        "ok": drive["exit_code"] == 0 and complete and all(d["found"] for d in evidence) and not hits,
    }
