"""The harness's end of `obs drive`: the mission's scenario, run by the harness when the agent asks.

An HTTP endpoint on loopback, forwarded into the sandbox like the telemetry query endpoint.
`POST /drive {"duration": s, "vus": n, "ask": bool}` runs the scenario from the mission's own
sources (never the agent's workspace copy, which the agent can edit, and which would then run
outside the sandbox) against the services' host addresses, with the run's tag key in the
scenario's environment only, and answers with the scenario's record once it has ended. The
agent sees the record, the store and the scenario's source; never the key. One drive at a
time, a few per run, each bounded in duration and users; the drive gate (`drive.py`) counts
only the traces these drives tagged.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.mission_services import service_env

MAX_DRIVES = 3  # a retry or two after a failed drive; the scenario is meant to run once
MAX_DURATION_S = 300.0
MAX_VUS = 10
MAX_BODY = 4096
GRACE_S = 90.0  # the scenario's own graceful stop (30 s) and its start, on a loaded machine


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DriveServer:
    """`scenario_root`: the folder holding the mission's `scenario` package; `targets`: the
    services' host URLs (SHOP_API_URL, ...); `run_dir`: where each drive's record and log go."""

    def __init__(self, scenario_root: Path, targets: dict[str, str], run_dir: Path,
                 max_drives: int = MAX_DRIVES) -> None:
        self.scenario_root, self.targets, self.run_dir = scenario_root, dict(targets), run_dir
        self.key = secrets.token_bytes(32)  # in memory and in the scenario's environment only
        self.max_drives = max_drives
        self.drives: list[dict[str, Any]] = []  # one entry per drive run: what was asked, how it ended
        self._busy = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._closed = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by design
                pass

            def _send(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] == "/health":
                    self._send(200, {"ok": True, "drives": len(server.drives), "max_drives": server.max_drives})
                else:
                    self._send(404, {"error": f"no route GET {self.path}"})

            def do_POST(self) -> None:  # noqa: N802
                if self.path.split("?")[0] != "/drive":
                    self._send(404, {"error": f"no route POST {self.path}"})
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    if not 0 <= length <= MAX_BODY:
                        raise Refused(413, f"request body over {MAX_BODY} bytes")
                    raw = self.rfile.read(length) if length else b"{}"
                    try:
                        ask = json.loads(raw or b"{}")
                    except ValueError:
                        raise Refused(400, "the request body is not JSON") from None
                    self._send(200, server.drive(ask))
                except Refused as exc:
                    self._send(exc.status, {"error": str(exc)})

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="drive-server", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- one drive
    @staticmethod
    def _asked(ask: Any) -> tuple[float, int, bool]:
        if not isinstance(ask, dict):
            raise Refused(400, "the request must be a JSON object")
        try:
            duration = float(ask.get("duration", 120))
            vus = int(ask.get("vus", 5))
        except (TypeError, ValueError):
            raise Refused(400, "duration must be a number of seconds and vus a whole number") from None
        if not 1 <= duration <= MAX_DURATION_S or not 1 <= vus <= MAX_VUS:
            raise Refused(400, f"duration must be 1..{MAX_DURATION_S:g} s and vus 1..{MAX_VUS}")
        return duration, vus, bool(ask.get("ask", True))

    def drive(self, ask: Any) -> dict:
        duration, vus, with_questions = self._asked(ask)
        if not self._busy.acquire(blocking=False):
            raise Refused(409, "a drive is already running; wait for it to end")
        try:
            if self._closed:
                raise Refused(503, "the mission's services are stopping")
            if len(self.drives) >= self.max_drives:
                raise Refused(429, f"the harness has run {len(self.drives)} drives for this run, the most it runs")
            return self._run(duration, vus, with_questions)
        finally:
            self._busy.release()

    def _run(self, duration: float, vus: int, with_questions: bool) -> dict:
        n = len(self.drives) + 1
        out, log = self.run_dir / f"harness-drive-{n}.json", self.run_dir / f"harness-drive-{n}.log"
        argv = [sys.executable, "-m", "scenario", "run", "--duration", f"{duration:g}", "--vus", str(vus),
                "--run-id", f"{self.run_dir.name}-{n}", "--out", str(out), *([] if with_questions else ["--no-ask"])]
        env = service_env(DRIVE_TAG_KEY=self.key.hex(), PYTHONDONTWRITEBYTECODE="1", **self.targets)
        entry: dict[str, Any] = {"n": n, "duration_s": duration, "vus": vus, "ask": with_questions,
                                 "record": out.name, "log": log.name}
        self.drives.append(entry)
        entry["start"] = datetime.now(UTC)  # before its first request: the gate's window for this drive
        started = time.monotonic()
        with open(log, "wb") as fh:
            self._proc = subprocess.Popen(argv, cwd=self.scenario_root, env=env, stdin=subprocess.DEVNULL,
                                          stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = self._proc.wait(timeout=duration + GRACE_S)
            except subprocess.TimeoutExpired:
                _kill(self._proc)
                code = None
            finally:
                self._proc = None
        entry["end"] = datetime.now(UTC)
        entry["exit_code"], entry["wall_s"] = code, round(time.monotonic() - started, 1)
        try:
            record = json.loads(out.read_text())
        except (OSError, ValueError):
            record = None
        if code != 0 or not isinstance(record, dict):
            tail = log.read_text(errors="replace")[-400:] if log.is_file() else ""
            why = "timed out" if code is None else f"exited {code}"
            raise Refused(500, f"the scenario {why} after {entry['wall_s']:g} s: {tail.strip()}")
        record.pop("targets", None)  # host addresses: the agent has its own
        return record

    def windows(self) -> list[tuple[datetime, datetime]]:
        """When each drive ran (a drive under way at the stop: until now)."""
        return [(d["start"], d.get("end") or datetime.now(UTC)) for d in self.drives]

    def close(self) -> None:
        """Stop serving and end a drive under way (the services are going down)."""
        self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            _kill(proc)
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> DriveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
