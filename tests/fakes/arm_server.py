"""A loopback stand-in for Azure Resource Manager's Microsoft.App API, over TLS, for the
azure stack's tests. The real SDK (azure-mgmt-appcontainers, azure-identity through
a stand-in `az` on PATH) talks to it exactly as it talks to Azure:

- resource group, Container Apps environments (+ storages), the region's workload
  profile types, subscriptions;
- container apps: PUT (201 + Azure-AsyncOperation, polled to Succeeded or Failed),
  GET, DELETE (202 + Azure-AsyncOperation; 204 when missing), listSecrets,
  getAuthtoken, revisions, replicas;
- the console log stream (`.../logstream?follow=true&tailLines=N`, its own token);
- Container Apps usages (of the location and of the environment): the GPU quota
  "Managed Environment Consumption NCA100 GPUs", its limit and what the live apps use;
  a create past it (or scripted for one app) is refused with 409 QuotaExceeded;
- ARM's error shapes: 401 (a token it did not issue), 404 (ResourceNotFound), 409
  (an operation already in progress; a refused create), 429 with Retry-After (scripted
  throttling rules) and a create whose provisioning fails.

A created app "boots" as scripted by `Behaviour.boot`: a fake vLLM (the replay server,
demanding the app's `vllm-api-key` as bearer key on /v1) comes up on the ingress FQDN
`127.0.0.1:<port>`, or it never does, or it crash-loops, or it logs a fatal start.
The tests read this object's state (apps alive, apps deleted, every request) directly:
the server runs in a thread of the test process.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import ssl
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trustme

from harness.atomic import write_atomic
from harness.replay.server import Handler as ReplayHandler
from harness.replay.server import ReplayServer, shut_down
from harness.replay.trajectory import load_trajectory

SUBSCRIPTION = "8f6c2a1e-5b7d-4c3e-9a10-0000000be4c1"
SUBSCRIPTION_NAME = "llms-benchmark-tests"
RESOURCE_GROUP = "rg-vot"
LOCATION = "swedencentral"
ENV_NAME = "vot-env"
CALLER_IP = "203.0.113.7"
DEFAULT_DOMAIN = "calmsea-1234abcd.swedencentral.azurecontainerapps.io"
GPU_TYPE = "Consumption-GPU-NC24-A100"
MAX_LOG_LINES = 2000  # a scripted boot never logs more


@dataclass
class Throttle:
    """Answer `count` requests matching method + path fragment with 429 + Retry-After."""

    method: str
    path_contains: str
    count: int
    retry_after_s: int = 1


@dataclass
class Behaviour:
    provision_s: float = 0.6  # how long the create LRO stays InProgress
    create: str = "ok"  # ok | failed (provisioning Failed, the app stays) | conflict (PUT answers 409)
    boot: str = "ok"  # ok | never | crashloop | fatal
    boot_s: float = 0.6
    delete_s: float = 0.4
    vllm_tls: bool = True
    trajectory: Path | None = None  # what the fake vLLM plays (default: nothing scripted)
    throttle: list[Throttle] = field(default_factory=list)
    resource_groups: tuple[str, ...] = (RESOURCE_GROUP,)
    environments: list[dict] | None = None  # None: one `vot-env` with the gpu-a100 profile
    offered_types: tuple[str, ...] = ("Consumption", GPU_TYPE, "Consumption-GPU-NC8as-T4")
    storages: tuple[str, ...] = ()
    # The GPU quota the usages API reports ("Managed Environment Consumption NCA100 GPUs"): its
    # limit, and GPUs in use by apps this server does not hold (each live gpu-a100 app uses one).
    gpu_quota: int = 100
    gpu_used_elsewhere: int = 0
    enforce_quota: bool = False  # a create past the quota is refused (409 QuotaExceeded), as Azure does
    quota_refusals: dict[str, int] = field(default_factory=dict)  # app -> its next N creates refused for quota
    boot_by_app: dict[str, str] = field(default_factory=dict)  # app -> its own `boot` (the rest: `boot`)
    boot_sequence: dict[str, list[str]] = field(default_factory=dict)  # app -> `boot` of its next creates, in turn
    # app -> its next N PUTs answered 503 before anything is made (the SDK retries each: issue 61)
    create_unavailable: dict[str, int] = field(default_factory=dict)


def gpu_environment(name: str = ENV_NAME, profiles: list[dict] | None = None, location: str = "Sweden Central") -> dict:
    if profiles is None:
        profiles = [{"name": "Consumption", "workloadProfileType": "Consumption"},
                    {"name": "gpu-a100", "workloadProfileType": GPU_TYPE}]
    return {
        "id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.App/"
              f"managedEnvironments/{name}",
        "name": name, "type": "Microsoft.App/managedEnvironments", "location": location,
        "properties": {"provisioningState": "Succeeded", "defaultDomain": DEFAULT_DOMAIN,
                       "workloadProfiles": profiles, "appLogsConfiguration": None},
    }


def now_iso(offset_s: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset_s)).isoformat().replace("+00:00", "Z")


def reserve_port() -> socket.socket:
    """A loopback port held bound, not listening (a connection is refused, as by a container still
    booting), until the app's fake vLLM binds beside it: a port only picked and freed for the
    boot's seconds was taken meanwhile once ("Address already in use", CI)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


# -- the fake vLLM: the replay server, with vLLM's bearer-key check on /v1 --------------------------
class KeyedHandler(ReplayHandler):
    def _refused(self) -> bool:
        if urlsplit(self.path).path.startswith("/v1") and \
                self.headers.get("Authorization") != f"Bearer {self.server.api_key}":
            self.close_connection = True
            self.send_json(401, {"error": "Unauthorized"})
            return True
        return False

    def do_GET(self) -> None:
        if not self._refused():
            super().do_GET()

    def do_POST(self) -> None:
        if not self._refused():
            super().do_POST()


class FakeVllm(ReplayServer):
    def __init__(self, port: int, trajectory, model: str, max_model_len: int, api_key: str,
                 tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", port), trajectory, model, max_model_len)
        self.RequestHandlerClass = KeyedHandler
        self.api_key, self.tls = api_key, tls
        self.requests: list[tuple[str, str, int]] = []

    def finish_request(self, request, client_address) -> None:
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


# -- one container app ----------------------------------------------------------------------------
@dataclass
class FakeApp:
    name: str
    rg: str
    body: dict
    secrets: dict[str, str]
    hold: socket.socket = field(default_factory=reserve_port, repr=False)  # the port, until vLLM binds it
    created: float = field(default_factory=time.monotonic)
    created_at: str = field(default_factory=lambda: now_iso())  # systemData.createdAt, as ARM reports it
    state: str = "InProgress"  # InProgress | Succeeded | Failed | Deleting
    revision: str | None = None
    restarts: int = 0
    running: str = "Waiting"
    details: str = ""
    ready: bool = False
    auth_token: str = field(default_factory=lambda: f"logstream-{uuid.uuid4().hex}")
    log: list[str] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    gone: threading.Event = field(default_factory=threading.Event)
    vllm: FakeVllm | None = None
    port: int = field(init=False)

    def __post_init__(self) -> None:
        self.port = self.hold.getsockname()[1]

    def release(self) -> None:
        self.hold.close()

    @property
    def args(self) -> list[str]:
        return self.body["properties"]["template"]["containers"][0]["args"]

    def arg(self, flag: str) -> str | None:
        args = self.args
        return args[args.index(flag) + 1] if flag in args else None

    def say(self, *lines: str) -> None:
        with self.cond:
            if len(self.log) < MAX_LOG_LINES:
                self.log.extend(lines)
            self.cond.notify_all()


@dataclass
class Operation:
    kind: str  # create | delete
    app: FakeApp
    done_at: float
    outcome: str = "ok"
    finished: bool = False


class FakeArm:
    """The server plus its state; use as a context manager."""

    def __init__(self, workdir: Path, behaviour: Behaviour | None = None) -> None:
        self.workdir = workdir
        self.behaviour = behaviour or Behaviour()
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = workdir / "fake-arm-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.tls)
        self.token = f"arm-{uuid.uuid4().hex}"  # what the stand-in `az` hands out
        self.apps: dict[str, FakeApp] = {}
        self.deleted: list[str] = []
        self.created: list[str] = []
        self.issued_keys: list[str] = []  # every `vllm-api-key` a PUT carried (for leak scans)
        self.requests: list[dict] = []
        # Every app's life as the server saw it: (monotonic time, "created" | "deleted", name).
        self.app_log: list[tuple[float, str, str]] = []
        self.ops: dict[str, Operation] = {}
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server = _ArmHttp(("127.0.0.1", 0), self)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"

    # lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "FakeArm":
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for app in list(self.apps.values()):
            self._kill(app)
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    # what tests read -----------------------------------------------------------------------
    def app(self, name: str) -> FakeApp | None:
        with self.lock:
            self._tick()
            return self.apps.get(name)

    def wait_for(self, check, timeout_s: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                self._tick()
            value = check()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError("the fake ARM never reached the awaited state")

    def add_app(self, name: str) -> FakeApp:
        """An app that exists already (served by someone else, or left behind)."""
        body = {"location": LOCATION, "properties": {"configuration": {}, "template": {
            "containers": [{"name": "vllm", "args": ["some/model", "--served-model-name", "other"]}]}}}
        app = FakeApp(name=name, rg=RESOURCE_GROUP, body=body, secrets={}, state="Succeeded",
                      revision=f"{name}--0000001")
        with self.lock:
            self.apps[name] = app
        return app

    def vanish(self, name: str) -> None:
        """The app disappears behind the harness's back (the portal, vllm-on-tap's /vot-destroy)."""
        with self.lock:
            app = self.apps.pop(name)
            self.app_log.append((time.monotonic(), "deleted", name))
        self._kill(app)

    def peak_apps(self) -> int:
        """The most apps alive at once, from `app_log` (a create counts from its PUT, a delete
        once it finished)."""
        alive = peak = 0
        for _, what, _name in sorted(self.app_log):
            alive += 1 if what == "created" else -1
            peak = max(peak, alive)
        return peak

    def gpus_in_use(self) -> int:
        with self.lock:
            return self.behaviour.gpu_used_elsewhere + sum(
                1 for a in self.apps.values() if a.body.get("properties", {}).get("workloadProfileName") == "gpu-a100")

    def calls(self, method: str, fragment: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and fragment in r["path"]]

    def cli_env(self, bin_dir: Path) -> dict[str, str]:
        """Variables a CLI process needs to reach this server as Azure."""
        write_fake_az(bin_dir, self)
        return {
            "LLMS_BENCHMARK_ARM_ENDPOINT": self.url,
            "LLMS_BENCHMARK_PUBLIC_IP_URL": f"{self.url}/ip",
            "LLMS_BENCHMARK_AZURE_POLL_S": "0.2",
            "AZURE_TOKEN_CREDENTIALS": "AzureCliCredential",  # DefaultAzureCredential, CLI link only
            "REQUESTS_CA_BUNDLE": str(self.ca_file),  # azure-core (requests)
            "SSL_CERT_FILE": str(self.ca_file),  # httpx
        }

    @property
    def az_state_file(self) -> Path:
        return self.workdir / "fake-az.json"

    def set_az(self, **state: Any) -> None:
        current = json.loads(self.az_state_file.read_text()) if self.az_state_file.exists() else {}
        current.update(state)
        write_atomic(self.az_state_file, json.dumps(current))  # a running launch's fake `az` never reads it torn

    # state machine ---------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        for op in list(self.ops.values()):
            if op.finished or now < op.done_at:
                continue
            op.finished = True
            app = op.app
            if op.kind == "create":
                if op.outcome == "failed":
                    app.state = "Failed"
                    app.revision = f"{app.name}--0000001"
                else:
                    app.state = "Succeeded"
                    app.revision = f"{app.name}--0000001"
                    self._spawn(self._boot, app)
            else:
                self._kill(app)
                self.apps.pop(app.name, None)
                self.deleted.append(app.name)
                self.app_log.append((time.monotonic(), "deleted", app.name))

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _kill(self, app: FakeApp) -> None:
        app.release()
        app.gone.set()
        with app.cond:
            app.cond.notify_all()
        if app.vllm is not None:
            shut_down(app.vllm, grace_s=0.5)
            app.vllm = None

    def _boot(self, app: FakeApp) -> None:
        """The container's life as scripted: bounded by its deletion and the server's end."""
        b = self.behaviour
        stop = lambda s: app.gone.wait(s) or self.stopping.is_set()  # noqa: E731
        app.running = "Running"
        app.say(f"INFO vLLM API server version 0.30.0 serving {app.args[0]}",
                f"INFO non-default args: model={app.args[0]!r}, served_model_name={app.arg('--served-model-name')!r}")
        with self.lock:
            sequence = b.boot_sequence.get(app.name)
            boot = sequence.pop(0) if sequence else b.boot_by_app.get(app.name, b.boot)
        if boot == "ok":
            if stop(b.boot_s):
                return
            traj = load_trajectory(b.trajectory) if b.trajectory else _empty_trajectory(self.workdir)
            tls = self.tls if b.vllm_tls else None
            app.vllm = FakeVllm(app.port, traj, app.arg("--served-model-name"),
                                int(app.arg("--max-model-len") or 65536), app.secrets["vllm-api-key"], tls)
            app.release()  # bound beside the hold (both reuse the address): the port was never free
            self._spawn(app.vllm.serve_forever, 0.05)
            app.ready = True
            app.say("INFO:     Started server process [1]", "INFO:     Application startup complete.")
        elif boot == "never":
            for i in range(MAX_LOG_LINES // 2):
                app.say(f"INFO Loading safetensors checkpoint shards: {i % 100}% Completed")
                if stop(0.3):
                    return
        elif boot == "fatal":
            if stop(b.boot_s):
                return
            app.say("ERROR Engine core initialization failed. See root cause above.",
                    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                    "ERROR EngineCore failed to start.")
            app.running, app.restarts = "Terminated", 1
        elif boot == "crashloop":
            for _ in range(50):
                if stop(0.3):
                    return
                app.say("RuntimeError: CUDA error: no kernel image is available for execution on the device",
                        "Container 'vllm' was terminated with exit code '1'")
                app.restarts += 1
                app.running = "Waiting"
                if app.restarts >= 2:
                    app.details = "CrashLoopBackOff: back-off 10s restarting failed container"
                app.say(f"INFO vLLM API server version 0.30.0 serving {app.args[0]}")

    # views -------------------------------------------------------------------------------------
    def app_view(self, app: FakeApp) -> dict:
        body = copy.deepcopy(app.body)
        props = body.setdefault("properties", {})
        conf = props.setdefault("configuration", {})
        conf["secrets"] = [{"name": n} for n in app.secrets]  # ARM never returns secret values
        conf.setdefault("ingress", {})["fqdn"] = f"127.0.0.1:{app.port}"
        base = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{app.rg}"
        props.update(
            provisioningState=app.state, runningStatus="Running" if app.ready else "Progressing",
            latestRevisionName=app.revision, latestReadyRevisionName=app.revision if app.ready else None,
            latestRevisionFqdn=f"127.0.0.1:{app.port}",
            eventStreamEndpoint=f"{self.url}{base}/containerApps/{app.name}/eventstream",
            managedEnvironmentId=props.get("environmentId"), outboundIpAddresses=["20.91.0.1"],
        )
        body.update(id=f"{base}/providers/Microsoft.App/containerApps/{app.name}", name=app.name,
                    type="Microsoft.App/containerApps",
                    systemData={"createdAt": app.created_at, "createdByType": "User",
                                "lastModifiedAt": app.created_at})
        return body

    def replica_view(self, app: FakeApp) -> dict:
        base = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{app.rg}"
        replica = f"{app.revision}-6d8f9c7b5-x2x7q"
        endpoint = (f"{self.url}{base}/containerApps/{app.name}/revisions/{app.revision}/replicas/{replica}"
                    f"/containers/vllm/logstream")
        return {
            "id": f"{base}/providers/Microsoft.App/containerApps/{app.name}/revisions/{app.revision}/replicas/{replica}",
            "name": replica, "type": "Microsoft.App/containerApps/revisions/replicas",
            "properties": {"createdTime": now_iso(), "runningState": "Running" if app.ready else "NotRunning",
                           "containers": [{"name": "vllm", "containerId": "containerd://1", "ready": app.ready,
                                           "started": app.running == "Running", "restartCount": app.restarts,
                                           "runningState": app.running, "runningStateDetails": app.details,
                                           "logStreamEndpoint": endpoint}]},
        }


def _empty_trajectory(workdir: Path):
    # A file of its own per boot: apps boot on threads of their own, and one boot writing the
    # shared name while another read it found it empty (a matrix resume's app never booted).
    path = workdir / f"fake-vllm-empty-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text("trajectories: []\n")
    try:
        return load_trajectory(path)
    finally:
        path.unlink(missing_ok=True)


# -- HTTP ------------------------------------------------------------------------------------------
PREFIX = r"^/subscriptions/(?P<sub>[^/]+)"
APPS = PREFIX + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.App/containerApps/(?P<app>[^/]+)"
ROUTES = [
    ("GET", r"^/subscriptions$", "subscriptions"),
    ("GET", PREFIX + r"/resourcegroups/(?P<rg>[^/]+)$", "resource_group"),
    ("GET", PREFIX + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.App/managedEnvironments$", "environments"),
    ("GET", PREFIX + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.App/managedEnvironments/(?P<env>[^/]+)"
            r"/storages$", "storages"),
    ("GET", PREFIX + r"/providers/Microsoft\.App/locations/(?P<loc>[^/]+)/availableManagedEnvironmentsWorkloadProfileTypes$",
     "profile_types"),
    ("GET", PREFIX + r"/providers/Microsoft\.App/locations/(?P<loc>[^/]+)/containerappOperationStatuses/(?P<op>[^/]+)$",
     "operation"),
    ("GET", PREFIX + r"/providers/Microsoft\.App/locations/(?P<loc>[^/]+)/usages$", "usages"),
    ("GET", PREFIX + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.App/managedEnvironments/(?P<env>[^/]+)"
            r"/usages$", "usages"),
    ("PUT", APPS + "$", "put_app"),
    ("GET", APPS + "$", "get_app"),
    ("DELETE", APPS + "$", "delete_app"),
    ("POST", APPS + "/listSecrets$", "list_secrets"),
    ("POST", APPS + "/getAuthtoken$", "auth_token"),
    ("GET", APPS + "/revisions$", "revisions"),
    ("GET", APPS + r"/revisions/(?P<rev>[^/]+)$", "revision"),
    ("GET", APPS + r"/revisions/(?P<rev>[^/]+)/replicas$", "replicas"),
]
LOGSTREAM = re.compile(PREFIX + r"/resourceGroups/(?P<rg>[^/]+)/containerApps/(?P<app>[^/]+)/revisions/[^/]+"
                                r"/replicas/[^/]+/containers/[^/]+/logstream$")


class _ArmHttp(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, arm: FakeArm) -> None:
        self.arm = arm
        super().__init__(address, _ArmHandler)

    def finish_request(self, request, client_address) -> None:
        try:
            request = self.arm.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


class _ArmHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ArmHttp

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # plumbing -------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        arm = self.server.arm
        parts = urlsplit(self.path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        entry = {"method": method, "path": path, "query": query, "t": time.monotonic(), "status": None}
        with arm.lock:
            arm.requests.append(entry)
        if path == "/ip":
            return self._send(entry, 200, CALLER_IP.encode(), "text/plain")
        if method == "GET" and (m := LOGSTREAM.match(path)):
            return self._logstream(entry, m, query)
        for rule in arm.behaviour.throttle:
            if rule.method == method and rule.path_contains in path and rule.count > 0:
                rule.count -= 1
                return self._json(entry, 429, _error("TooManyRequests", "Too many requests; retry later."),
                                  {"Retry-After": str(rule.retry_after_s)})
        if self.headers.get("Authorization") != f"Bearer {arm.token}":
            return self._json(entry, 401, _error("InvalidAuthenticationToken",
                                                 "The access token is invalid or has expired."))
        if "api-version" not in query and path != "/ip":
            return self._json(entry, 400, _error("MissingApiVersionParameter", "The api-version is required."))
        for verb, pattern, name in ROUTES:
            if verb == method and (m := re.match(pattern, path)):
                body = json.loads(raw) if raw else None
                with arm.lock:
                    arm._tick()
                    status, payload, headers = getattr(self, f"_{name}")(arm, m.groupdict(), body)
                return self._json(entry, status, payload, headers)
        return self._json(entry, 404, _error("NoRegisteredProviderFound", f"no route for {method} {path}"))

    def _json(self, entry: dict, status: int, payload: Any, headers: dict | None = None) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self._send(entry, status, data, "application/json", headers)

    def _send(self, entry: dict, status: int, data: bytes, ctype: str, headers: dict | None = None) -> None:
        entry["status"] = status
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _app_or_404(self, arm: FakeArm, g: dict) -> FakeApp | tuple:
        app = arm.apps.get(g["app"])
        if app is None or app.rg != g["rg"]:
            return 404, _error("ResourceNotFound", f"The Resource 'Microsoft.App/containerApps/{g['app']}' under "
                                                   f"resource group '{g['rg']}' was not found."), None
        return app

    def _operation_url(self, arm: FakeArm, op: Operation) -> str:
        op_id = uuid.uuid4().hex
        arm.ops[op_id] = op
        return (f"{arm.url}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.App/locations/{LOCATION}/"
                f"containerappOperationStatuses/{op_id}?api-version=2026-07-01")

    # routes ----------------------------------------------------------------------------------
    def _subscriptions(self, arm, g, body):
        return 200, {"value": [{"id": f"/subscriptions/{SUBSCRIPTION}", "subscriptionId": SUBSCRIPTION,
                                "displayName": SUBSCRIPTION_NAME, "state": "Enabled"}]}, None

    def _resource_group(self, arm, g, body):
        if g["rg"] not in arm.behaviour.resource_groups:
            return 404, _error("ResourceGroupNotFound", f"Resource group '{g['rg']}' could not be found."), None
        return 200, {"id": f"/subscriptions/{g['sub']}/resourceGroups/{g['rg']}", "name": g["rg"],
                     "location": LOCATION, "properties": {"provisioningState": "Succeeded"}}, None

    def _environments(self, arm, g, body):
        envs = arm.behaviour.environments
        return 200, {"value": [gpu_environment()] if envs is None else envs}, None

    def _storages(self, arm, g, body):
        return 200, {"value": [{"name": s, "properties": {"azureFile": {"shareName": s}}}
                               for s in arm.behaviour.storages]}, None

    def _profile_types(self, arm, g, body):
        return 200, {"value": [{"name": t, "location": g["loc"],
                                "properties": {"category": "GPU" if "GPU" in t else "Consumption",
                                               "applicability": "LocationDefault", "gpus": 1 if "GPU" in t else 0,
                                               "displayName": t}}
                               for t in arm.behaviour.offered_types]}, None

    def _operation(self, arm, g, body):
        op = arm.ops.get(g["op"])
        if op is None:
            return 404, _error("OperationNotFound", "no such operation"), None
        doc = {"id": self.path, "name": g["op"], "startTime": now_iso()}
        if not op.finished:
            return 200, {**doc, "status": "InProgress"}, None
        if op.outcome == "failed":
            return 200, {**doc, "status": "Failed", "error": _error(
                "ContainerAppProvisioningFailed",
                "Failed to provision revision for container app 'vot-x': the GPU workload profile has no capacity "
                "(quota).")["error"]}, None
        return 200, {**doc, "status": "Succeeded"}, None

    def _usages(self, arm, g, body):
        """Container Apps usages (of a location, or of one environment): the GPU quota and its use."""
        return 200, {"value": [
            {"unit": "Count", "currentValue": arm.gpus_in_use(), "limit": arm.behaviour.gpu_quota,
             "name": {"value": "ManagedEnvironmentConsumptionNCA100Gpus",
                      "localizedValue": "Managed Environment Consumption NCA100 GPUs"}},
            {"unit": "Count", "currentValue": 1, "limit": 15,
             "name": {"value": "ManagedEnvironmentCount", "localizedValue": "Managed Environment Count"}},
        ]}, None

    def _put_app(self, arm, g, body):
        b = arm.behaviour
        if b.create_unavailable.get(g["app"], 0) > 0:
            b.create_unavailable[g["app"]] -= 1
            return 503, _error("ServiceUnavailable", "The service is temporarily unavailable."), {"Retry-After": "1"}
        existing = arm.apps.get(g["app"])
        if existing is not None and existing.state in ("InProgress", "Deleting"):
            return 409, _error("ContainerAppOperationInProgress",
                               f"Cannot modify container app '{g['app']}': an operation is in progress."), None
        if b.create == "conflict":
            return 409, _error("Conflict", "The managed environment's workload profile 'gpu-a100' cannot take "
                                           "another replica (quota)."), None
        if b.quota_refusals.get(g["app"], 0) > 0 or (
                b.enforce_quota and existing is None and arm.gpus_in_use() >= b.gpu_quota):
            if b.quota_refusals.get(g["app"], 0) > 0:
                b.quota_refusals[g["app"]] -= 1
            return 409, _error("QuotaExceeded", f"Operation would exceed the quota 'Managed Environment Consumption "
                                                f"NCA100 GPUs' of the environment (limit {b.gpu_quota}, in use "
                                                f"{arm.gpus_in_use()}): request more on its Quota page."), None
        props = body["properties"]
        secrets = {s["name"]: s["value"] for s in props["configuration"].get("secrets", [])}
        stored = copy.deepcopy(body)
        stored["properties"]["configuration"]["secrets"] = [{"name": n} for n in secrets]
        app = FakeApp(name=g["app"], rg=g["rg"], body=stored, secrets=secrets)
        arm.issued_keys.extend(v for n, v in secrets.items() if n == "vllm-api-key")
        arm.apps[app.name] = app
        arm.created.append(app.name)
        arm.app_log.append((time.monotonic(), "created", app.name))
        op = Operation("create", app, time.monotonic() + b.provision_s, outcome=b.create)
        url = self._operation_url(arm, op)
        return 201, arm.app_view(app), {"Azure-AsyncOperation": url}

    def _get_app(self, arm, g, body):
        app = self._app_or_404(arm, g)
        return app if isinstance(app, tuple) else (200, arm.app_view(app), None)

    def _delete_app(self, arm, g, body):
        app = arm.apps.get(g["app"])
        if app is None:
            return 204, None, None
        if app.state == "InProgress":
            return 409, _error("ContainerAppOperationInProgress",
                               f"Cannot delete container app '{app.name}': its create is still in progress."), None
        if app.state != "Deleting":
            app.state = "Deleting"
            op = Operation("delete", app, time.monotonic() + arm.behaviour.delete_s)
            url = self._operation_url(arm, op)
            return 202, None, {"Azure-AsyncOperation": url, "Location": url}
        return 202, None, None

    def _list_secrets(self, arm, g, body):
        app = self._app_or_404(arm, g)
        if isinstance(app, tuple):
            return app
        return 200, {"value": [{"name": n, "value": v} for n, v in app.secrets.items()]}, None

    def _auth_token(self, arm, g, body):
        app = self._app_or_404(arm, g)
        if isinstance(app, tuple):
            return app
        endpoint = (f"{arm.url}/subscriptions/{SUBSCRIPTION}/resourceGroups/{app.rg}/containerApps/{app.name}"
                    f"/revisions/{app.revision}/replicas/any/containers/vllm/logstream")
        return 200, {"id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{app.rg}/providers/Microsoft.App/"
                           f"containerApps/{app.name}/getAuthtoken", "name": app.name, "location": LOCATION,
                     "properties": {"token": app.auth_token, "expires": now_iso(3600),
                                    "logStreamEndpoint": endpoint}}, None

    def _revision_doc(self, arm, app: FakeApp) -> dict:
        failed = app.state == "Failed"
        return {"name": app.revision, "properties": {
            "active": True, "provisioningState": "Failed" if failed else "Provisioned",
            "runningState": "Failed" if failed else ("Running" if app.ready else "Processing"),
            "provisioningError": "image pull or GPU capacity failure" if failed else None,
            "fqdn": f"127.0.0.1:{app.port}", "replicas": 1}}

    def _revisions(self, arm, g, body):
        app = self._app_or_404(arm, g)
        if isinstance(app, tuple):
            return app
        return 200, {"value": [self._revision_doc(arm, app)] if app.revision else []}, None

    def _revision(self, arm, g, body):
        app = self._app_or_404(arm, g)
        if isinstance(app, tuple):
            return app
        if app.revision != g["rev"]:
            return 404, _error("ResourceNotFound", f"revision {g['rev']} not found"), None
        return 200, self._revision_doc(arm, app), None

    def _replicas(self, arm, g, body):
        app = self._app_or_404(arm, g)
        if isinstance(app, tuple):
            return app
        ok = app.revision == g["rev"] and app.state in ("Succeeded", "Deleting")
        return 200, {"value": [arm.replica_view(app)] if ok else []}, None

    # the console log stream: chunked, follows until the app is deleted or the client leaves ---------
    def _logstream(self, entry: dict, m: re.Match, query: dict) -> None:
        arm = self.server.arm
        app = arm.apps.get(m["app"])
        if app is None:
            return self._json(entry, 404, _error("ResourceNotFound", "no such app"))
        if self.headers.get("Authorization") != f"Bearer {app.auth_token}":
            return self._json(entry, 401, _error("Unauthorized", "invalid log stream token"))
        tail = int(query.get("tailLines") or 20)
        follow = query.get("follow") == "true"
        entry["status"] = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with app.cond:
            sent = max(0, len(app.log) - tail)
        deadline = time.monotonic() + 120
        try:
            while True:
                with app.cond:
                    lines = app.log[sent:]
                    sent += len(lines)
                if lines:
                    self._chunk("".join(f"{line}\n" for line in lines).encode())
                if not follow or app.gone.is_set() or arm.stopping.is_set() or time.monotonic() > deadline:
                    break
                with app.cond:
                    if len(app.log) == sent:
                        app.cond.wait(0.2)
            self._chunk(b"")
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# -- the stand-in `az` ----------------------------------------------------------------------------
def write_fake_az(bin_dir: Path, arm: FakeArm) -> Path:
    """An `az` on PATH answering what azure-identity's AzureCliCredential and the stack ask:
    `account get-access-token` (the fake ARM's token) and `account show` (the subscription).
    Its state file says whether it is logged in and which token it hands out."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    if not arm.az_state_file.exists():
        arm.set_az(logged_in=True, token=arm.token, subscription=SUBSCRIPTION)
    script = f"""\
        #!{sys.executable}
        import json, sys, time
        state = json.load(open({str(arm.az_state_file)!r}))
        with open({str(arm.workdir / "fake-az-argv.jsonl")!r}, "a") as log:
            log.write(json.dumps(sys.argv[1:]) + "\\n")
        args = sys.argv[1:]
        if not state.get("logged_in"):
            print("ERROR: Please run 'az login' to setup account.", file=sys.stderr)
            sys.exit(1)
        if args[:2] == ["account", "get-access-token"]:
            print(json.dumps({{"accessToken": state["token"], "expires_on": int(time.time()) + 3600,
                              "expiresOn": "2099-01-01 00:00:00.000000", "subscription": state["subscription"],
                              "tenant": "72f988bf-0000-0000-0000-000000000000", "tokenType": "Bearer"}}))
        elif args[:2] == ["account", "show"]:
            if "--query" in args:
                print(state["subscription"])
            else:
                print(json.dumps({{"id": state["subscription"], "name": "llms-benchmark-tests"}}))
        else:
            print("fake az: unsupported command " + " ".join(args), file=sys.stderr)
            sys.exit(2)
    """
    path = bin_dir / "az"
    path.write_text(textwrap.dedent(script))
    path.chmod(0o755)
    return path
