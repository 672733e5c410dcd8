"""The served model as the phases see it: base URL, model, key (in memory only), served
context, the server's own identity, and two ways to ask it (streamed and whole).

Errors quote the response body (a bad model slug explains itself). A 429 or a transient
5xx is asked again under the seed's Retry-After policy (harness/wire/retry.py), and every
retry and every empty answer is counted in the endpoint's `tally` (one per phase).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.errors import UserError
from harness.serving import engine as serving_engine
from harness.fitness.config import RetryCfg
from harness.fitness.retry import Tally
from harness.wire import sse
from harness.wire.retry import Busy, Retrier, busy
from harness.wire.tls import tls

BODY_QUOTE = 500
REPLAY_OWNER = serving_engine.REPLAY_OWNER  # the replay server's `owned_by`: a script, not a model


class PhaseError(Exception):
    """A phase could not measure what it measures (the server refused, the data is missing)."""


@dataclass
class Answer:
    content: str = ""
    reasoning: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)  # [{name, arguments (raw text)}]
    finish: str | None = None
    usage: dict[str, Any] | None = None
    ttft_s: float | None = None  # streamed: seconds to the first generated delta (text, reasoning or a call)
    timings: dict[str, Any] | None = None  # llama.cpp's own per-request timings (prefill and decode speed)


@dataclass
class Endpoint:
    base_url: str  # the server's root (no /v1)
    model: str
    api_key: str | None = field(default=None, repr=False)
    max_model_len: int | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    scripted: bool = False
    timeout_s: float = 900.0
    retry: RetryCfg = field(default_factory=RetryCfg)
    tally: Tally = field(default_factory=Tally)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def retrier(self, transient: Callable[[BaseException], str | None] | None = None) -> Retrier:
        return Retrier(self.retry, self.sleep, self.retry.budget_s, tally=self.tally,
                       transient=transient or (lambda exc: _transient(self.retry, exc)))

    def _answered(self, answer: Answer) -> Answer:
        self.tally.answered(empty=not (answer.content or "").strip() and not answer.calls)
        return answer

    def _body(self, messages: list[dict], **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, **extra}

    def chat(self, messages: list[dict], **extra: Any) -> Answer:
        """One non-streamed chat completion."""
        retrier = self.retrier()
        try:
            for attempt in retrier:
                with attempt:
                    resp = busy(httpx.post(f"{self.base_url}/v1/chat/completions", json=self._body(messages, **extra),
                                            headers=self.headers(), timeout=self.timeout_s, verify=tls()),
                                 self.retry.statuses)
        except Busy as exc:
            resp = exc.response
        except httpx.HTTPError as exc:
            raise PhaseError(f"POST /v1/chat/completions failed{_after(retrier)}: "
                             f"{exc or type(exc).__name__}") from None
        if resp.status_code != 200:
            raise PhaseError(f"POST /v1/chat/completions answered HTTP {resp.status_code}{_after(retrier)}: "
                             f"{resp.text[:BODY_QUOTE]}")
        try:
            data = resp.json()
            choice = data["choices"][0]
            msg = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise PhaseError(f"not a chat completion: {resp.text[:BODY_QUOTE]}") from None
        calls = [{"name": (tc.get("function") or {}).get("name") or "",
                  "arguments": (tc.get("function") or {}).get("arguments") or ""}
                 for tc in msg.get("tool_calls") or []]
        return self._answered(Answer(msg.get("content") or "", msg.get("reasoning_content") or msg.get("reasoning")
                                     or "", calls, choice.get("finish_reason"), data.get("usage"),
                                     timings=data.get("timings")))

    def stream(self, messages: list[dict], **extra: Any) -> Answer:
        """One streamed chat completion, its deltas folded the way an OpenAI client folds them."""
        body = self._body(messages, stream=True, stream_options={"include_usage": True}, **extra)
        retrier = self.retrier()
        try:
            for attempt in retrier:
                with attempt:
                    answer = self._stream_once(body, retrier)
        except Busy as exc:
            raise PhaseError(f"POST /v1/chat/completions (stream) answered HTTP {exc.status}{_after(retrier)}: "
                             f"{exc.response.text[:BODY_QUOTE]}") from None
        except httpx.HTTPError as exc:
            raise PhaseError(f"POST /v1/chat/completions (stream) failed{_after(retrier)}: "
                             f"{exc or type(exc).__name__}") from None
        return self._answered(answer)

    def _stream_once(self, body: dict[str, Any], retrier: Retrier) -> Answer:
        """One streamed attempt; `Busy` when its status is retried (only before any chunk was read)."""
        answer, slots, t0 = Answer(), {}, time.monotonic()
        with httpx.stream("POST", f"{self.base_url}/v1/chat/completions", json=body, headers=self.headers(),
                          timeout=self.timeout_s, verify=tls()) as resp:
            if resp.status_code != 200:
                resp.read()
                busy(resp, self.retry.statuses)
                raise PhaseError(f"POST /v1/chat/completions (stream) answered HTTP {resp.status_code}"
                                 f"{_after(retrier)}: {resp.text[:BODY_QUOTE]}")
            for data in sse.events(resp.iter_bytes()):
                if data == sse.DONE:
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise PhaseError(f"a stream chunk is not JSON: {data[:BODY_QUOTE]}") from None
                if chunk.get("error"):
                    raise PhaseError(f"the stream carried an error: {json.dumps(chunk['error'])[:BODY_QUOTE]}")
                answer.usage = chunk.get("usage") or answer.usage
                answer.timings = chunk.get("timings") or answer.timings
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if answer.ttft_s is None and any(delta.get(k) for k in (
                            "content", "reasoning_content", "reasoning", "tool_calls")):
                        answer.ttft_s = time.monotonic() - t0
                    answer.content += delta.get("content") or ""
                    answer.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                    answer.finish = choice.get("finish_reason") or answer.finish
                    for tc in delta.get("tool_calls") or []:
                        slot = slots.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                        fn = tc.get("function") or {}
                        slot["name"] += fn.get("name") or ""
                        slot["arguments"] += fn.get("arguments") or ""
        answer.calls = [slots[i] for i in sorted(slots)]
        return answer


def _transient(retry: RetryCfg, exc: BaseException) -> str | None:
    # refused or dropped before an answer (a server restarting); a read timeout is not asked again
    return "connect" if retry.connect_errors and isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError)) \
        else None


def _after(retrier: Retrier) -> str:
    return f" (after {retrier.attempt} attempts, {retrier.waited:.0f}s waited)" if retrier.attempt > 1 else ""


def discover(base_url: str, model: str | None, api_key: str | None, timeout_s: float,
             max_model_len: int | None = None, scripted: bool = False, *, retry: RetryCfg | None = None,
             tally: Tally | None = None, sleep: Callable[[float], None] = time.sleep) -> Endpoint:
    """The endpoint behind `base_url`: it answers, lists the model; its served context and identity.
    A refused connection, a 429 or a transient 5xx is asked again under the retry policy."""
    retry = retry or RetryCfg()
    tally = tally if tally is not None else Tally()
    root = base_url.rstrip("/").removesuffix("/v1")
    if not root.startswith(("http://", "https://")):
        raise UserError(f"'{base_url}' is not an http(s) URL", field="base URL",
                        fix="give the server's base URL, e.g. http://127.0.0.1:8000")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    retrier = Retrier(retry, sleep, retry.budget_s, tally=tally, transient=lambda exc: _transient(retry, exc))
    try:
        for attempt in retrier:
            with attempt:
                resp = busy(httpx.get(f"{root}/v1/models", headers=headers, timeout=10, verify=tls()), retry.statuses)
    except Busy as exc:
        resp = exc.response
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {root}{_after(retrier)}: {exc or type(exc).__name__}", field="base URL",
                        fix="start the server, or correct the URL (GET <url>/v1/models must answer)") from None
    if resp.status_code != 200:
        raise UserError(f"{root}/v1/models answered HTTP {resp.status_code}: {resp.text[:BODY_QUOTE]}",
                        field="base URL", fix="pass the key's variable with --api-key-env"
                        if resp.status_code in (401, 403) else "point at an OpenAI-compatible server")
    try:
        listing = resp.json()
        entries = {m["id"]: m for m in listing.get("data", [])}
    except (ValueError, AttributeError, KeyError, TypeError):
        raise UserError(f"{root}/v1/models did not answer with a model list", field="base URL",
                        fix="give the base URL of an OpenAI-compatible server (it must answer GET /v1/models)") from None
    chosen = model or next(iter(entries), None)
    if chosen is None or chosen not in entries:
        raise UserError(f"the server does not serve model '{chosen}' (it lists: {', '.join(entries) or 'none'})",
                        field="--model", fix="pass a model it lists with --model")
    identity: dict[str, Any] = {"models": listing}
    for path in ("/version", "/props"):
        try:
            r = httpx.get(f"{root}{path}", headers=headers, timeout=5, verify=tls())
            if r.status_code == 200:
                identity[path.strip("/")] = r.json()
        except (httpx.HTTPError, ValueError):
            pass
    served = max_model_len or entries[chosen].get("max_model_len")
    props = identity.get("props") or {}
    if not served and isinstance(props, dict):
        served = (props.get("default_generation_settings") or {}).get("n_ctx") or props.get("n_ctx")
    # a replay server reached by URL is as scripted as one served as a unit
    scripted = scripted or entries[chosen].get("owned_by") == REPLAY_OWNER
    return Endpoint(root, chosen, api_key, int(served) if served else None, identity, scripted, timeout_s,
                    retry=retry, tally=tally, sleep=sleep)


def engine_of(identity: dict[str, Any]) -> dict[str, Any]:
    """The engine and its version, as the server says them (harness/serving/engine.py reads them)."""
    info = serving_engine.engine_of(identity)
    name = "replay (scripted trajectory, not a model)" if info.name == "replay" else info.name
    return {"engine": name, "version": info.version}