"""Start and stop the shop stack (model server, shop-api, shop-mcp, shop-agent) on loopback.

    python infra/stack.py --store http://127.0.0.1:PORT [--workdir DIR]

Every process runs in its own process group; `stop()` sends SIGTERM (so each service shuts
its telemetry providers down and flushes), then SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.mission_services import service_env

MISSION = Path(__file__).resolve().parents[1]
SRC = MISSION / "workspace" / "src"
MODEL_SERVER = MISSION / "infra" / "model_server.py"
HEALTH_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    urls: dict[str, str]
    workdir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Environment for the scenario: where the services listen."""
        return {
            "SHOP_API_URL": self.urls["api"],
            "SHOP_MCP_URL": self.urls["mcp"],
            "SHOP_AGENT_URL": self.urls["agent"],
        }

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict[str, int | None]:
        # Front to back, so the API still answers while the others flush.
        order = ["agent", "mcp", "api", "model"]
        for name in order:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for name in order:
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        return {name: proc.returncode for name, proc in self.procs.items()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _spawn(stack: Stack, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
    log_path = stack.workdir / f"{name}.log"
    stack.logs[name] = log_path
    out = open(log_path, "wb")
    stack.procs[name] = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    out.close()


def _wait(stack: Stack, name: str, check, deadline: float) -> None:
    proc = stack.procs[name]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; see {stack.logs[name]}")
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{name} not healthy within {HEALTH_TIMEOUT_S}s; see {stack.logs[name]}")


def _mcp_answers(url: str) -> bool:
    payload = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "stack-probe", "version": "1"}},
    }
    r = httpx.post(url, json=payload, headers={"Accept": "application/json, text/event-stream"}, timeout=3)
    return r.status_code == 200


def start_stack(store_url: str, workdir: str | os.PathLike, python: str = sys.executable,
                ingest_token: str | None = None, src: str | os.PathLike | None = None) -> Stack:
    """`ingest_token`: the store's ingest token, given to the services only (the standard
    OTEL_EXPORTER_OTLP_HEADERS; the profiler reads it too), never to the scenario or the agent.
    `src`: the services' sources, the mission's own unless a control store is being made from a
    copy with one defect fixed (never the agent's workspace)."""
    workdir = Path(workdir)
    src = Path(src) if src is not None else SRC
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("api", "mcp", "agent", "model")}
    urls = {
        "api": f"http://127.0.0.1:{ports['api']}",
        "mcp": f"http://127.0.0.1:{ports['mcp']}/mcp",
        "agent": f"http://127.0.0.1:{ports['agent']}",
        "model": f"http://127.0.0.1:{ports['model']}/v1",
        "store": store_url.rstrip("/"),
    }
    stack = Stack(urls=urls, workdir=workdir)
    env = service_env()  # the launch's credentials and keys stay out of what the agent drives
    env.update(
        {
            "PYTHONPATH": str(src),
            "PYTHONUNBUFFERED": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": store_url.rstrip("/"),
            "SHOP_API_PORT": str(ports["api"]),
            "SHOP_MCP_PORT": str(ports["mcp"]),
            "SHOP_AGENT_PORT": str(ports["agent"]),
            "SHOP_API_URL": urls["api"],
            "SHOP_MCP_URL": urls["mcp"],
            "SHOP_MODEL_URL": urls["model"],
            "SHOP_DB_PATH": str(workdir / "shop.db"),
        }
    )
    if ingest_token:
        env["OTEL_EXPORTER_OTLP_HEADERS"] = f"authorization=Bearer%20{ingest_token}"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    try:
        _spawn(stack, "model", [python, str(MODEL_SERVER), "--port", str(ports["model"])], env, workdir)
        _spawn(stack, "api", [python, "-m", "shop_api"], env, src)
        _wait(stack, "model", lambda: httpx.get(f"{urls['model']}/models", timeout=2).status_code == 200, deadline)
        _wait(stack, "api", lambda: httpx.get(f"{urls['api']}/health", timeout=2).status_code == 200, deadline)
        _spawn(stack, "mcp", [python, "-m", "shop_mcp"], env, src)
        _spawn(stack, "agent", [python, "-m", "shop_agent"], env, src)
        _wait(stack, "mcp", lambda: _mcp_answers(urls["mcp"]), deadline)
        _wait(stack, "agent", lambda: httpx.get(f"{urls['agent']}/health", timeout=2).status_code == 200, deadline)
    except BaseException:
        stack.stop(grace_s=5)
        raise
    return stack


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="telemetry store URL (OTLP/HTTP endpoint)")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="shop-stack-")
    stack = start_stack(args.store, workdir)
    print(json.dumps({"urls": stack.urls, "workdir": str(workdir), "env": stack.env()}, indent=2), flush=True)
    print("stack up; Ctrl-C to stop", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while all(p.poll() is None for p in stack.procs.values()):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        print(json.dumps(stack.stop()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
