"""The azure unit's console log, followed from creation into a local file, and its
replica watched for a crash loop.

What `az containerapp logs show --follow` does: a short-lived token from the app's
`getAuthtoken`, then a streamed GET of the replica container's `logstream` endpoint
(`follow=true`, `output=text`, `tailLines=300`). A reconnect starts again with a tail of
the log, so the part that repeats what was already written is dropped (`Deduper`).

Between connections the follower reads the app, its latest revision and replica: a
container restarted `CRASH_LOOP_RESTARTS` times, or a failed revision, becomes one
marked line in the log (`MARK`), which the unit-log watcher treats as fatal, so the
launch destroys at once and the log says why.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import httpx
from azure.core.exceptions import AzureError, ResourceNotFoundError

from harness.stacks.azure_arm import describe
from harness.wire.tls import tls

MARK = "[llms-benchmark]"
CRASH_LOOP = f"{MARK} crash loop"
REVISION_FAILED = f"{MARK} revision failed"
CRASH_LOOP_RESTARTS = 3
TAIL_LINES = 300
# The log-stream API escapes a few characters; the Azure CLI un-escapes these.
_UNESCAPE = {"\\u0022": '"', "\\u001B": "\x1b", "\\u002B": "+", "\\u0027": "'"}


class Deduper:
    """Lines of a log stream that may reconnect: after `reconnect()`, the longest run of
    incoming lines that continues the lines already passed is dropped."""

    def __init__(self, keep: int = TAIL_LINES) -> None:
        self.history: deque[str] = deque(maxlen=keep)
        self._syncing = False
        self._snapshot: list[str] = []
        self._held: list[str] = []
        self._cands: list[int] | None = None
        self._best = 0

    def reconnect(self) -> list[str]:
        """A new connection starts; returns lines still held from the previous one."""
        out = self.end()
        self._syncing, self._snapshot = True, list(self.history)
        self._held, self._cands, self._best = [], None, 0
        return out

    def feed(self, line: str) -> list[str]:
        if not self._syncing:
            self.history.append(line)
            return [line]
        seen, k = self._snapshot, len(self._held)
        if self._cands is None:
            self._cands = [s for s in range(len(seen)) if seen[s] == line]
        else:
            self._cands = [s for s in self._cands if s + k < len(seen) and seen[s + k] == line]
        self._held.append(line)
        k += 1
        if any(s + k == len(seen) for s in self._cands):
            self._best = k  # everything held so far repeats the end of what was written
        if not any(s + k < len(seen) for s in self._cands):
            return self._resolve()
        return []

    def end(self) -> list[str]:
        """The connection ended: held lines that turned out not to repeat are new. Held lines
        that still continue a run of what was written are a tail cut short (the follower
        ends each connection after poll_s, and a loaded box replays a 300-line tail slowly):
        they repeat, and the next connection's tail brings them again if they are new."""
        if not self._syncing:
            return []
        if self._cands:
            self._syncing, self._held, self._cands = False, [], None
            return []
        return self._resolve()

    def _resolve(self) -> list[str]:
        out = self._held[self._best:]
        self._syncing, self._held, self._cands = False, [], None
        self.history.extend(out)
        return out


class LogFollower(threading.Thread):
    """Follows one app's console log into `dest` until `stop()`; never raises."""

    def __init__(self, arm, resource_group: str, app: str, subscription_id: str, dest: Path,
                 poll_s: float) -> None:
        super().__init__(name=f"azure-log-{app}", daemon=True)
        self.arm, self.rg, self.app, self.sub = arm, resource_group, app, subscription_id
        self.dest, self.poll_s = dest, max(poll_s, 0.05)
        self.gone = False  # the app disappeared on its own (not through our destroy)
        self._halt = threading.Event()
        self._dedupe = Deduper()
        self._token: tuple[str, str, float] | None = None  # token, log-stream base, expiry (epoch)
        self._said: set[str] = set()
        self._last_error = ""

    # -- lifecycle --------------------------------------------------------------------
    def stop(self, timeout_s: float = 10.0) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=timeout_s)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                target = self._status()
                if target is None:
                    if self.gone:
                        return
                    self._halt.wait(self.poll_s)
                    continue
                self._stream(*target)
                self._last_error = ""
            except ResourceNotFoundError:
                if not self._halt.is_set():
                    self.gone = True
                    self._say(f"{MARK} the app {self.app} no longer exists")
                return
            except (AzureError, httpx.HTTPError, KeyError, ValueError, OSError) as exc:
                text = describe(exc)
                if text != self._last_error:  # one line per distinct problem, not one per poll
                    self._last_error = text
                    self._write([f"{MARK} log stream unavailable: {text}"])
                self._halt.wait(self.poll_s)

    # -- the app's state ---------------------------------------------------------------
    def _status(self) -> tuple[str, str, str] | None:
        """(revision, replica, container) to stream from, or None while there is none yet."""
        app = self.arm.container_apps.get(self.rg, self.app)
        props = app.get("properties") or {}
        revision = props.get("latestRevisionName")
        if props.get("provisioningState") == "Failed":
            self._say(f"{REVISION_FAILED}: the app {self.app} is in provisioning state Failed")
        if not revision:
            return None
        replicas = self.arm.container_apps_revision_replicas.list_replicas(self.rg, self.app, revision).get("value")
        if not replicas:
            rev = (self.arm.container_apps_revisions.get_revision(self.rg, self.app, revision).get("properties") or {})
            if "Failed" in (rev.get("provisioningState"), rev.get("runningState")):
                why = rev.get("provisioningError") or rev.get("runningStateDetails") or "no details"
                self._say(f"{REVISION_FAILED}: {revision} is {rev.get('provisioningState')}/"
                          f"{rev.get('runningState')}: {why}")
            return None
        replica = replicas[0]
        containers = (replica.get("properties") or {}).get("containers") or []
        if not containers:
            return None
        container = next((c for c in containers if c.get("name") == "vllm"), containers[0])
        restarts = container.get("restartCount") or 0
        details = container.get("runningStateDetails") or ""
        if restarts >= CRASH_LOOP_RESTARTS or "CrashLoopBackOff" in details:
            self._say(f"{CRASH_LOOP}: container {container.get('name')} of {self.app} restarted {restarts} times "
                      f"(state {container.get('runningState')}: {details or 'no details'})")
        return revision, replica["name"], container["name"]

    def _say(self, line: str) -> None:
        """A marked line, written once."""
        if line not in self._said:
            self._said.add(line)
            self._write([line])

    # -- the stream ---------------------------------------------------------------------
    def _auth(self) -> tuple[str, str]:
        now = time.time()
        if self._token is None or self._token[2] - 60 < now:
            tok = self.arm.container_apps.get_auth_token(self.rg, self.app)
            props = tok.get("properties") or {}
            endpoint = props.get("logStreamEndpoint") or self._event_stream_endpoint()
            base = endpoint[: endpoint.index("/subscriptions/")]
            self._token = (props["token"], base, _epoch(props.get("expires"), now + 300))
        return self._token[0], self._token[1]

    def _event_stream_endpoint(self) -> str:
        app = self.arm.container_apps.get(self.rg, self.app)
        return (app.get("properties") or {})["eventStreamEndpoint"]

    def _stream(self, revision: str, replica: str, container: str) -> None:
        """One connection, until the log is quiet for poll_s, poll_s has passed since the
        status was read, the stream ends, or stop()."""
        token, base = self._auth()
        url = (f"{base}/subscriptions/{self.sub}/resourceGroups/{self.rg}/containerApps/{self.app}"
               f"/revisions/{revision}/replicas/{replica}/containers/{container}/logstream")
        params = {"follow": "true", "output": "text", "tailLines": str(TAIL_LINES)}
        timeout = httpx.Timeout(10.0, read=self.poll_s)
        started = time.monotonic()
        self._write(self._dedupe.reconnect())
        try:
            with httpx.Client(timeout=timeout, verify=tls()) as http, http.stream(
                    "GET", url, params=params, headers={"Authorization": f"Bearer {token}"}) as resp:
                if resp.status_code == 401:
                    self._token = None  # expired early: fetch a new one next time
                if resp.status_code != 200:
                    raise httpx.HTTPStatusError(f"log stream answered HTTP {resp.status_code}",
                                                request=resp.request, response=resp)
                for raw in resp.iter_lines():
                    if raw:
                        self._write(self._dedupe.feed(_unescape(raw)))
                    if self._halt.is_set() or time.monotonic() - started > self.poll_s:
                        break
        except httpx.ReadTimeout:
            pass  # quiet for poll_s: read the status, then reconnect
        finally:
            self._write(self._dedupe.end())
        if time.monotonic() - started < self.poll_s:
            self._halt.wait(min(self.poll_s, 1.0))  # a stream that ends at once is not a busy loop

    def _write(self, lines: list[str]) -> None:
        if lines:
            with open(self.dest, "a", encoding="utf-8") as out:
                out.write("".join(f"{line}\n" for line in lines))


def _unescape(line: str) -> str:
    for escaped, char in _UNESCAPE.items():
        line = line.replace(escaped, char)
    return line


def _epoch(value: str | None, default: float) -> float:
    if not value:
        return default
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return default
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()
