"""Teacher-forced next-token distributions from a server's own API, and what identifies its
tokenizer. Token ids go in (so both servers see exactly the same prefixes), the top-k
logprobs of the next token come out, for every position of a prompt.

- llama.cpp: `POST /tokenize`; `POST /completion` with the prefix as token ids, `n_predict: 1`,
  `n_probs: k` and `cache_prompt` (one request per position, each evaluating one new token
  over the cached prefix); its logprobs are the softmax of the raw logits (the sampler
  settings do not touch them). The vocabulary size and type come from `/v1/models` `meta`.
- vLLM: `POST /tokenize`; `POST /v1/completions` with the ids, `max_tokens: 1` and
  `prompt_logprobs: k` (one request per prompt: every position at once).

Requests are retried under the run's policy (harness/wire/retry.py) and counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.fitness.config import RetryCfg
from harness.fitness.endpoint import BODY_QUOTE, PhaseError
from harness.fitness.retry import Tally
from harness.wire.retry import Busy, Retrier, busy
from harness.wire.tls import tls

APIS = ("llamacpp", "vllm")


@dataclass
class Native:
    base_url: str  # the server's root
    model: str | None
    api: str  # llamacpp | vllm
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 300.0
    retry: RetryCfg = field(default_factory=RetryCfg)
    tally: Tally = field(default_factory=Tally)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        retrier = Retrier(self.retry, self.sleep, self.retry.budget_s, tally=self.tally, transient=lambda exc: "connect"
                          if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError)) else None)
        try:
            for attempt in retrier:
                with attempt:
                    resp = busy(httpx.post(f"{self.base_url}{path}", json=body, headers=headers,
                                           timeout=self.timeout_s, verify=tls()), self.retry.statuses)
        except Busy as exc:
            resp = exc.response
        except httpx.HTTPError as exc:
            raise PhaseError(f"POST {self.base_url}{path} failed: {exc or type(exc).__name__}") from None
        if resp.status_code != 200:
            raise PhaseError(f"POST {self.base_url}{path} answered HTTP {resp.status_code}: "
                             f"{resp.text[:BODY_QUOTE]}")
        try:
            return resp.json()
        except ValueError:
            raise PhaseError(f"POST {self.base_url}{path} did not answer JSON: {resp.text[:BODY_QUOTE]}") from None

    def tokenize(self, text: str) -> list[int]:
        if self.api == "llamacpp":
            doc = self._post("/tokenize", {"content": text, "add_special": False})
        else:
            doc = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise PhaseError(f"{self.base_url}/tokenize did not answer a list of token ids")
        return tokens

    def next_tokens(self, tokens: list[int], first: int, last: int, k: int) -> list[dict[int, float]]:
        """The top-k {token id: logprob} of the token after tokens[:j], for j = first..last."""
        if self.api == "llamacpp":
            return [self._llamacpp_at(tokens[:j], k) for j in range(first, last + 1)]
        return self._vllm(tokens[:last + 1], k)[first - 1:last]

    def _llamacpp_at(self, prefix: list[int], k: int) -> dict[int, float]:
        doc = self._post("/completion", {"prompt": prefix, "n_predict": 1, "n_probs": k, "cache_prompt": True,
                                         "id_slot": 0, "temperature": 0})
        try:
            top = doc["completion_probabilities"][0]["top_logprobs"]
            return {int(t["id"]): float(t["logprob"]) for t in top}
        except (KeyError, IndexError, TypeError, ValueError):
            raise PhaseError(f"{self.base_url}/completion answered no top-k logprobs with ids (n_probs): "
                             f"{str(doc)[:BODY_QUOTE]} — this llama.cpp build is too old") from None

    def _vllm(self, tokens: list[int], k: int) -> list[dict[int, float]]:
        doc = self._post("/v1/completions", {"model": self.model, "prompt": tokens, "max_tokens": 1,
                                             "temperature": 0, "prompt_logprobs": k})
        try:
            per = doc["choices"][0]["prompt_logprobs"]
            out = []
            for entry in per[1:]:  # the first prompt token has no prefix to be predicted from
                ranked = sorted(((int(t), float(v["logprob"])) for t, v in entry.items()), key=lambda x: -x[1])
                out.append(dict(ranked[:k]))  # vLLM adds the prompt's own token beyond the k: keep the k
            return out
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise PhaseError(f"{self.base_url}/v1/completions answered no prompt_logprobs: {str(doc)[:BODY_QUOTE]}"
                             " (vLLM needs --max-logprobs at least k)") from None

    def vocabulary(self) -> dict[str, Any]:
        """What the server says of its vocabulary (llama.cpp: size and type; vLLM: nothing here)."""
        if self.api != "llamacpp":
            return {}
        try:
            resp = httpx.get(f"{self.base_url}/v1/models", timeout=10, verify=tls(),
                             headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
            entries = resp.json().get("data", [])
            entry = next((m for m in entries if m.get("id") == self.model), entries[0] if entries else {})
            meta = entry.get("meta") or {}
        except (httpx.HTTPError, ValueError, AttributeError):
            return {}
        return {k: meta[k] for k in ("n_vocab", "vocab_type") if k in meta}


def detect(base_url: str, api_key: str | None, timeout_s: float = 10) -> str | None:
    """llamacpp (its /props carries build_info), vllm (its /version answers), or None."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        props = httpx.get(f"{base_url}/props", headers=headers, timeout=timeout_s, verify=tls())
        if props.status_code == 200 and isinstance(props.json(), dict) and "build_info" in props.json():
            return "llamacpp"
    except (httpx.HTTPError, ValueError):
        pass
    try:
        ver = httpx.get(f"{base_url}/version", headers=headers, timeout=timeout_s, verify=tls())
        if ver.status_code == 200 and isinstance(ver.json(), dict) and ver.json().get("version"):
            return "vllm"
    except (httpx.HTTPError, ValueError):
        pass
    return None
