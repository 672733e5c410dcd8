"""The KL quant check against loopback stand-ins speaking llama.cpp's native API (`/tokenize`,
`/completion` with `n_probs`, `/props`, `/v1/models` meta) and vLLM's (`/tokenize`,
`/v1/completions` with `prompt_logprobs`, `/version`). Their distributions are known in full
(a 4-token vocabulary, inside the top-20), so the expected divergences are computed here
independently, with plain math."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from test_fitness import fitness, results

from harness.fitness.divergence import compare

VOCAB = 4


def dist(j: int, shift: float) -> list[float]:
    """The next-token distribution after a prefix of j tokens; `shift` perturbs it (a 'quantization')."""
    logits = [2 * math.sin(j + i) + shift * math.cos(j * (i + 1)) for i in range(VOCAB)]
    z = sum(math.exp(x) for x in logits)
    return [math.exp(x) / z for x in logits]


def tokenize(text: str, offset: int) -> list[int]:
    return [(ord(c) + offset) % VOCAB for c in text]


class Native:
    """One stand-in server: api 'llamacpp' or 'vllm'; `shift` its perturbation, `offset` its tokenizer."""

    def __init__(self, api: str, shift: float = 0.0, offset: int = 0, n_vocab: int = VOCAB) -> None:
        owner = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _json(self, status: int, doc) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    entry = {"id": f"{api}-model", "object": "model", "owned_by": "llamacpp" if api == "llamacpp"
                             else "vllm"}
                    if api == "llamacpp":
                        entry["meta"] = {"vocab_type": 2, "n_vocab": n_vocab}
                    return self._json(200, {"object": "list", "data": [entry]})
                if self.path == "/props" and api == "llamacpp":
                    return self._json(200, {"build_info": "b9999-standin", "default_generation_settings": {"n_ctx": 4096}})
                if self.path == "/version" and api == "vllm":
                    return self._json(200, {"version": "0.11.0"})
                self._json(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner.requests += 1
                if self.path == "/tokenize":
                    text = body["content"] if api == "llamacpp" else body["prompt"]
                    return self._json(200, {"tokens": tokenize(text, offset)})
                if self.path == "/completion" and api == "llamacpp":
                    prefix, k = body["prompt"], body["n_probs"]
                    p = dist(len(prefix), shift)
                    top = sorted(({"id": i, "token": f"t{i}", "bytes": [116], "logprob": math.log(p[i])}
                                  for i in range(VOCAB)), key=lambda t: -t["logprob"])[:k]
                    return self._json(200, {"content": top[0]["token"], "completion_probabilities": [
                        {**top[0], "top_logprobs": top}]})
                if self.path == "/v1/completions" and api == "vllm":
                    ids, k = body["prompt"], body["prompt_logprobs"]
                    per = [None]
                    for j in range(1, len(ids)):
                        p = dist(j, shift)
                        ranked = sorted(range(VOCAB), key=lambda i: -p[i])
                        keep = set(ranked[:k]) | {ids[j]}  # vLLM adds the prompt's own token
                        per.append({str(i): {"logprob": math.log(p[i]), "rank": ranked.index(i) + 1,
                                             "decoded_token": f"t{i}"} for i in keep})
                    return self._json(200, {"choices": [{"index": 0, "text": "x", "prompt_logprobs": per}]})
                self._json(404, {"error": f"no {self.path} on this stand-in"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PROMPTS = ["def add(a, b):\n    return a + b\n", "Quantization shrinks the weights."]


def expected(shift_ref: float, shift_cand: float, positions: int, skip: int) -> dict[str, float]:
    sym, js, agree, n = 0.0, 0.0, 0, 0
    for text in PROMPTS:
        for j in range(skip + 1, min(skip + positions, len(text) - 1) + 1):
            p, q = dist(j, shift_ref), dist(j, shift_cand)
            m = [(a + b) / 2 for a, b in zip(p, q)]
            kl = lambda x, y: sum(a * math.log(a / b) for a, b in zip(x, y))  # noqa: E731
            sym += (kl(p, q) + kl(q, p)) / 2
            js += (kl(p, m) + kl(q, m)) / 2
            agree += p.index(max(p)) == q.index(max(q))
            n += 1
    return {"sym": sym / n, "js": js / n, "top1": agree / n, "n": n}


def run_kl(tmp: Path, candidate: Native, reference: Native, positions: int = 6, skip: int = 2):
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(PROMPTS)))
    cfg = tmp / "fitness.yaml"
    cfg.write_text(f"kl: {{reference: {{url: {reference.url}}}, prompts: {prompts}, positions: {positions}, "
                   f"skip_first: {skip}}}\n")
    out = tmp / "report"
    r = fitness(["run", candidate.url, "--phases", "kl", "--config", str(cfg), "--report-dir", str(out)], tmp)
    return r, out


@pytest.mark.parametrize("cand_api, ref_api", [("llamacpp", "llamacpp"), ("llamacpp", "vllm"), ("vllm", "llamacpp")])
def test_the_divergence_of_known_distributions(tmp_path: Path, cand_api: str, ref_api: str) -> None:
    cand, ref = Native(cand_api, shift=0.8), Native(ref_api, shift=0.0)
    try:
        r, out = run_kl(tmp_path, cand, ref)
    finally:
        cand.close()
        ref.close()
    assert r.returncode == 0, r.stderr
    doc = results(out)
    want = expected(0.0, 0.8, 6, 2)
    m = doc["metrics"]
    assert m["kl.sym_kl_mean"] == pytest.approx(want["sym"], abs=1e-5) and want["sym"] > 0.05
    assert m["kl.js_mean"] == pytest.approx(want["js"], abs=1e-5)
    assert m["kl.top1_agreement"] == pytest.approx(want["top1"], abs=1e-6)
    kl = next(p for p in doc["phases"] if p["name"] == "kl")
    assert kl["details"]["summary"]["positions"] == want["n"] == 12
    assert doc["kl_divergence"]["sym_kl_mean"] == m["kl.sym_kl_mean"]  # the seed's field, in results.json
    assert "Quant check (KL)" in (out / "report.md").read_text()


def test_identical_weights_read_zero(tmp_path: Path) -> None:
    cand, ref = Native("llamacpp", shift=0.3), Native("llamacpp", shift=0.3)
    try:
        r, out = run_kl(tmp_path, cand, ref)
    finally:
        cand.close()
        ref.close()
    assert r.returncode == 0, r.stderr
    m = results(out)["metrics"]
    assert m["kl.sym_kl_mean"] == 0 and m["kl.js_mean"] == 0 and m["kl.top1_agreement"] == 1


@pytest.mark.parametrize("how", ["vocabulary", "ids"])
def test_different_tokenizers_are_refused_by_name(tmp_path: Path, how: str) -> None:
    cand = Native("llamacpp")
    ref = Native("llamacpp", n_vocab=VOCAB + 1) if how == "vocabulary" else Native("llamacpp", offset=1)
    try:
        r, out = run_kl(tmp_path, cand, ref)
    finally:
        cand.close()
        ref.close()
    assert r.returncode == 3, r.stderr
    kl = next(p for p in results(out)["phases"] if p["name"] == "kl")
    assert kl["status"] == "error" and "refused: different tokenizers" in kl["reason"]
    assert ("n_vocab 5" in kl["reason"]) if how == "vocabulary" else ("tokenizes differently" in kl["reason"])
    assert ref.requests <= 2 * (len(PROMPTS) + 1)  # refused before any position was asked


def test_truncated_top_k_lists() -> None:
    """Tails the top-k cannot see: finite, symmetric, JS within ln 2, zero only for the same lists."""
    a = {1: math.log(0.5), 2: math.log(0.3)}
    b = {3: math.log(0.6), 4: math.log(0.3)}
    c = compare(a, b)
    assert all(math.isfinite(x) for x in (c.kl_pq, c.kl_qp, c.sym_kl, c.js)) and not c.top1_agree
    assert 0 < c.js <= math.log(2) and c.sym_kl == pytest.approx(compare(b, a).sym_kl)
    assert compare(a, a).sym_kl == 0 and compare(a, a).top1_agree
