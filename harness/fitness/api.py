"""The fitness HTTP API (FastAPI on uvicorn), for a web app or a scheduler:

    POST /api/runs                 -> 202 {run_id, status_url}   (409 while a run is active; 422 for
                                      a request that could not run: an unknown phase, a config or
                                      thresholds file that does not load — checked before the 202)
    POST /api/bench                -> the report JSON when the run ends (blocking; a client
                                      that disconnects cancels the run)
    GET  /api/runs                 -> every run of this server
    GET  /api/runs/<id>            -> status, exit code, report folder
    GET  /api/runs/<id>/report     -> the compact report JSON (404 until the run has one)
    POST /api/runs/<id>/cancel     -> ends the run; a served unit is destroyed by the run's own finally
    GET  /api/health               -> ok (no token needed)

Each run is `llms-benchmark fitness run ...` in a process group of its own, so a cancel is a
SIGTERM the run unwinds from exactly as from Ctrl-C (destroying its unit), then SIGKILL
after a grace period. One active run at a time. A bearer token, read from the environment
variable named by --token-env, is compared in constant time; without one the server only
binds a loopback address.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.errors import UserError

CANCEL_GRACE_S = 60.0


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: list[str] | None = Field(default=None, description="[ENVIRONMENT, PRESET] or [BASE_URL]")
    base_url: str | None = None
    model: str | None = None
    phases: str | list[str] | None = None
    skip: str | list[str] | None = None
    repeats: int | None = Field(default=None, ge=1, le=2)
    contexts: list[int] | None = None
    levels: list[int] | None = None
    limit: int | None = Field(default=None, ge=0)
    config: str | None = None  # a config file on this server
    thresholds: str | None = None  # a thresholds file on this server
    api_key_env: str | None = None
    # the seed's switch: every phase (judge, verdicts, exit code) rather than a subset
    pipeline: bool = False

    @field_validator("phases", "skip")
    @classmethod
    def _phase_names(cls, v: str | list[str] | None) -> str | list[str] | None:
        """Checked before the 202: a typo is a 422 naming it, not an accepted run that exits 3."""
        from harness.fitness.config import PHASE_ORDER, unknown_phase

        if v is None:
            return v
        names = [p.strip() for p in (v.split(",") if isinstance(v, str) else v) if p.strip()]
        if not names:
            raise ValueError(f"no phase named (phases: {', '.join(PHASE_ORDER)})")
        for name in names:
            if name not in PHASE_ORDER:
                raise ValueError(unknown_phase(name))
        return v

    @field_validator("contexts", "levels")
    @classmethod
    def _positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(n < 1 for n in v)):
            raise ValueError("a non-empty list of positive numbers")
        return v

    @model_validator(mode="after")
    def _one_target(self) -> "RunRequest":
        if self.pipeline and self.phases is not None:
            raise ValueError('"pipeline": true runs every phase: drop "phases" (or "pipeline")')
        if self.target and self.base_url:
            raise ValueError('give either "target" or "base_url", not both')
        if self.target is not None and not (len(self.target) == 2 or (len(self.target) == 1 and "://" in self.target[0])):
            raise ValueError('"target" is [ENVIRONMENT, PRESET] or [BASE_URL]')
        return self

    def check_files(self) -> None:
        """The config and thresholds files load (a UserError naming file and field otherwise)."""
        from harness.fitness.config import load_config
        from harness.fitness.thresholds import load_thresholds

        cfg = load_config(Path(self.config) if self.config else None)
        load_thresholds(Path(self.thresholds) if self.thresholds else cfg.thresholds)

    def argv(self) -> list[str]:
        args = list(self.target or [])
        flags: dict[str, Any] = {"--base-url": self.base_url, "--model": self.model, "--phases": _csv(self.phases),
                                 "--skip": _csv(self.skip), "--repeats": self.repeats,
                                 "--contexts": _csv(self.contexts), "--levels": _csv(self.levels),
                                 "--limit": self.limit, "--config": self.config, "--thresholds": self.thresholds,
                                 "--api-key-env": self.api_key_env}
        for flag, value in flags.items():
            if value is not None:
                args += [flag, str(value)]
        return args


def _csv(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return ",".join(str(v) for v in value)


@dataclass
class Run:
    id: str
    folder: Path
    proc: subprocess.Popen
    request: dict[str, Any]
    started: float = field(default_factory=time.time)
    cancelled: bool = False
    ended: float | None = None

    @property
    def exit_code(self) -> int | None:
        return self.proc.poll()

    @property
    def status(self) -> str:
        code = self.exit_code
        if code is None:
            return "cancelling" if self.cancelled else "running"
        if self.cancelled:
            return "cancelled"
        return {0: "passed", 1: "warned", 2: "failed"}.get(code, "error")

    def public(self, base: str) -> dict[str, Any]:
        return {"run_id": self.id, "status": self.status, "exit_code": self.exit_code,
                "report_dir": str(self.folder), "report_url": f"{base}/api/runs/{self.id}/report",
                "started": self.started, "request": self.request}


class Runs:
    """The runs of this server; at most one active."""

    def __init__(self, root: Path, runs_dir: Path) -> None:
        self.root, self.runs_dir = root, runs_dir
        self.runs: dict[str, Run] = {}
        self.lock = threading.Lock()

    def active(self) -> Run | None:
        return next((r for r in self.runs.values() if r.exit_code is None), None)

    def start(self, req: RunRequest) -> Run:
        try:
            req.check_files()
        except UserError as exc:
            raise HTTPException(422, detail=exc.render()) from None
        with self.lock:
            busy = self.active()
            if busy is not None:
                raise HTTPException(409, detail=f"run {busy.id} is active; one run at a time")
            run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
            folder = self.runs_dir / run_id
            folder.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "harness.cli", "fitness", "run", *req.argv(),
                    "--report-dir", str(folder), "--run-id", run_id, "--json"]
            env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(self.root), "COLUMNS": "250"}
            with open(folder / "run.log", "wb") as log:
                proc = subprocess.Popen(argv, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            run = self.runs[run_id] = Run(run_id, folder, proc, req.model_dump(exclude_none=True))
            return run

    def get(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise HTTPException(404, detail=f"no run {run_id}")
        return run

    def cancel(self, run: Run, grace_s: float = CANCEL_GRACE_S) -> None:
        """SIGTERM to the run's process group (it destroys its unit), SIGKILL after the grace."""
        if run.exit_code is not None:
            return
        run.cancelled = True
        _signal(run.proc, signal.SIGTERM)
        try:
            run.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal(run.proc, signal.SIGKILL)
            run.proc.wait(timeout=10)

    def cancel_all(self) -> None:
        for run in list(self.runs.values()):
            self.cancel(run)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def report_of(run: Run) -> dict[str, Any] | None:
    path = run.folder / "summary.json"
    if run.exit_code is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def create_app(root: Path, runs_dir: Path, token: str | None) -> FastAPI:
    runs = Runs(root, runs_dir)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await asyncio.to_thread(runs.cancel_all)  # a served unit never outlives the API

    app = FastAPI(title="llms-benchmark fitness", lifespan=lifespan)
    app.state.runs = runs

    def authorized(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, detail="a valid bearer token is required",
                                headers={"WWW-Authenticate": "Bearer"})

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        active = runs.active()
        return {"status": "ok", "active_run": active.id if active else None}

    @app.post("/api/runs", status_code=202, dependencies=[Depends(authorized)])
    def start(req: RunRequest, request: Request) -> JSONResponse:
        run = runs.start(req)
        url = f"{base(request)}/api/runs/{run.id}"
        return JSONResponse({"run_id": run.id, "status_url": url, "status": run.status}, status_code=202,
                            headers={"Location": url})

    @app.get("/api/runs", dependencies=[Depends(authorized)])
    def listing(request: Request) -> dict[str, Any]:
        return {"runs": [r.public(base(request)) for r in runs.runs.values()]}

    @app.get("/api/runs/{run_id}", dependencies=[Depends(authorized)])
    def status(run_id: str, request: Request) -> dict[str, Any]:
        return runs.get(run_id).public(base(request))

    @app.get("/api/runs/{run_id}/report", dependencies=[Depends(authorized)])
    def report(run_id: str) -> dict[str, Any]:
        doc = report_of(runs.get(run_id))
        if doc is None:
            raise HTTPException(404, detail="no report yet: the run has not finished (or wrote none)")
        return doc

    @app.post("/api/runs/{run_id}/cancel", dependencies=[Depends(authorized)])
    async def cancel(run_id: str, request: Request) -> dict[str, Any]:
        run = runs.get(run_id)
        await asyncio.to_thread(runs.cancel, run)
        return run.public(base(request))

    @app.post("/api/bench", dependencies=[Depends(authorized)])
    async def bench(req: RunRequest, request: Request) -> JSONResponse:
        run = runs.start(req)
        while run.exit_code is None:
            if await request.is_disconnected():
                await asyncio.to_thread(runs.cancel, run)
                return JSONResponse({"run_id": run.id, "status": run.status}, status_code=499)
            await asyncio.sleep(0.2)
        doc = report_of(run)
        if doc is None:
            return JSONResponse({"run_id": run.id, "status": run.status, "exit_code": run.exit_code,
                                 "detail": "the run wrote no report; see run.log in its folder"}, status_code=500)
        return JSONResponse(doc)

    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(root: Path, *, host: str, port: int, token_env: str | None, runs_dir: Path, say) -> None:
    import uvicorn

    token = None
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise UserError(f"${token_env} is not set", field="--token-env",
                            fix=f"export {token_env}=<a long random token> (the option names the variable, never the token)")
    elif not is_loopback(host):
        raise UserError(f"refusing to serve the API on {host} without a token", field="--host",
                        fix="pass --token-env NAME (the variable holding a bearer token), or bind 127.0.0.1")
    app = create_app(root, runs_dir, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise UserError(f"cannot bind {host}:{port}: {exc.strerror}", field="--port",
                        fix="choose another port (0 picks a free one)") from None
    bound = sock.getsockname()[1]
    say(f"fitness API on http://{host}:{bound} (runs in {runs_dir}; token {'from $' + token_env if token else 'off'})")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])
