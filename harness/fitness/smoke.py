#!/usr/bin/env python3
"""Seed 003's bare-stdlib smoke path: any box with python3, nothing installed, this one file.

    python3 harness/fitness/smoke.py --base-url http://127.0.0.1:8000 \\
        [--phases telemetry,warmup,tooluse,throughput,judge] [--model M] [--api-key-env NAME] \\
        [--prompt-tokens 512] [--out smoke.json] [--json]

The phases of the seed's smoke command (`run_bench.py --smoke --phases
telemetry,warmup,tooluse,throughput,judge`), each a small, single-request version of the full
pipeline's (`llms-benchmark fitness run`, the tools environment):

    telemetry   GET /metrics before any load: the server's request and KV gauges (vLLM, llama.cpp)
    warmup      seconds to the first complete answer (a swap-in lands here)
    tooluse     one streamed ask with a tool: a call with the tool's name and JSON-object arguments
                holding its required key (the --jinja trap: prose or a call written as text fails)
    throughput  one streamed request of ~--prompt-tokens seeded, uniquely tagged words: TTFT,
                prefill tok/s (prompt tokens / TTFT), decode tok/s (tokens after the first / time)
    judge       judge generation: the served model answers the first --judge-items judge tasks
                (judge_tasks.jsonl beside this file); grading them is the full pipeline's second pass
    kl          with --kl-reference URL (a second server: another quant of the same weights):
                teacher-forced top-k next-token logprobs from each server's native API (llama.cpp
                /completion n_probs, vLLM /v1/completions prompt_logprobs) over the first --kl-limit
                prompts of kl_prompts.jsonl; symmetric KL, JS, top-1 agreement, completed over the
                union of both top-k lists as harness/fitness/divergence.py does (a test checks they
                agree); refused when the two tokenize a prompt differently. Not in the default list.

Exit codes (the seed's contract): 0 every phase passed, 2 a phase failed (no tool call, empty
answers), 3 a pipeline error (usage, the endpoint unreachable, a phase that could not measure).
Standard library only (a test runs it with `python -I -S` from a copy of the file).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

PHASES = ("telemetry", "warmup", "tooluse", "throughput", "judge", "kl")
DEFAULT_PHASES = PHASES[:5]  # the seed's smoke command; kl when --kl-reference is given
EPS = 1e-10
PASS, FAIL, PIPELINE_ERROR = 0, 2, 3
TOOL = {"type": "function", "function": {
    "name": "read_file", "description": "Read a text file of the workspace and return its contents.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "the file's path"}},
                   "required": ["path"]}}}
TOOL_ASK = "Read the file src/app.py with the read_file tool. Call the tool; do not answer in prose."
GAUGES = re.compile(r"^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:kv_cache_usage_perc|"
                    r"llamacpp:requests_processing|llamacpp:requests_deferred|llamacpp:kv_cache_usage_ratio)"
                    r"(\{[^}]*\})?\s+(\S+)", re.M)
WORDS = ("river stone lamp quiet orbit maple signal copper window garden thunder pencil harbor velvet "
         "canyon lantern meadow silver rocket candle forest marble ribbon island").split()


class Failed(Exception):
    """The phase measured, and what it measured fails the smoke."""


class Broken(Exception):
    """The phase could not measure (the endpoint, the wire): a pipeline error."""


def sse_data(lines) -> Iterator[str]:
    """The payloads of the `data:` lines of a streamed body read line by line. The harness's
    one SSE decoder is harness/wire/sse.py; this file must run alone (one file, nothing beside
    it), so it keeps these lines, and tests/test_sse.py holds them to that decoder."""
    for raw in lines:
        if raw.startswith(b"data:"):
            yield raw[5:].strip().decode("utf-8", "replace")


class Client:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        self.root = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
        self.api_key, self.timeout_s = api_key, timeout_s

    def _request(self, method: str, path: str, body: dict | None = None) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        return urllib.request.Request(self.root + path, data=data, headers=headers, method=method)

    def post_json(self, path: str, body: dict) -> dict:
        try:
            with urllib.request.urlopen(self._request("POST", path, body), timeout=self.timeout_s) as resp:
                return json.loads(resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:
            raise Broken(f"POST {self.root}{path}: HTTP {exc.code}: {exc.read().decode('utf-8', 'replace')[:300]}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise Broken(f"POST {self.root}{path}: {getattr(exc, 'reason', exc)}") from None
        except ValueError:
            raise Broken(f"POST {self.root}{path} did not answer JSON") from None

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self._request("GET", path), timeout=self.timeout_s) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")[:300]
        except (urllib.error.URLError, OSError) as exc:
            raise Broken(f"GET {self.root}{path}: {getattr(exc, 'reason', exc)}") from None

    def stream_chat(self, body: dict) -> dict:
        """One streamed chat completion: text, reasoning, tool calls, usage and the times of the
        first and last content token (monotonic seconds from the request)."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        t0 = time.monotonic()
        out = {"text": "", "reasoning": "", "calls": {}, "usage": None, "first_s": None, "last_s": None,
               "chunks": 0, "finish": None}
        try:
            resp = urllib.request.urlopen(self._request("POST", "/v1/chat/completions", body), timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise Broken(f"POST /v1/chat/completions: HTTP {exc.code}: "
                         f"{exc.read().decode('utf-8', 'replace')[:300]}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise Broken(f"POST {self.root}/v1/chat/completions: {getattr(exc, 'reason', exc)}") from None
        with resp:
            for payload in sse_data(resp):
                if payload == "[DONE]":
                    break
                try:
                    doc = json.loads(payload)
                except ValueError:
                    raise Broken(f"a streamed chunk is not JSON: {payload[:200]}") from None
                if doc.get("usage"):
                    out["usage"] = doc["usage"]
                for choice in doc.get("choices") or []:
                    delta = choice.get("delta") or {}
                    now = time.monotonic() - t0
                    piece = delta.get("content") or ""
                    thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if piece or thought or delta.get("tool_calls"):
                        out["chunks"] += 1
                        out["first_s"] = now if out["first_s"] is None else out["first_s"]
                        out["last_s"] = now
                    out["text"] += piece
                    out["reasoning"] += thought
                    for call in delta.get("tool_calls") or []:
                        slot = out["calls"].setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                        fn = call.get("function") or {}
                        slot["name"] += fn.get("name") or ""
                        slot["arguments"] += fn.get("arguments") or ""
                    out["finish"] = choice.get("finish_reason") or out["finish"]
        out["calls"] = [out["calls"][k] for k in sorted(out["calls"])]
        out["wall_s"] = time.monotonic() - t0
        return out


def telemetry(client: Client, args) -> dict:
    status, text = client.get("/metrics")
    if status in (404, 501):  # llama.cpp answers 501 unless started with --metrics
        return {"status": "skipped", "reason": f"the server publishes no /metrics (HTTP {status}"
                                               + ("; llama.cpp: start it with --metrics)" if status == 501 else ")")}
    if status != 200:
        raise Broken(f"GET /metrics answered HTTP {status}: {text[:200]}")
    gauges = {}
    for name, _labels, value in GAUGES.findall(text):
        try:
            gauges[name] = gauges.get(name, 0.0) + float(value)
        except ValueError:
            continue
    busy = gauges.get("vllm:num_requests_running", 0) + gauges.get("llamacpp:requests_processing", 0)
    return {"metrics": {"telemetry.requests_running": busy}, "gauges": gauges,
            "note": "idle" if not busy else f"{busy:g} request(s) already running before the smoke"}


def warmup(client: Client, args) -> dict:
    got = client.stream_chat({"model": args.model, "messages": [{"role": "user", "content": "Reply with the single "
                                                                   "word: ready"}], "max_tokens": 8, "temperature": 0})
    if not (got["text"] or got["reasoning"]).strip():
        raise Failed("the first answer was empty")
    return {"metrics": {"warmup.first_answer_s": round(got["wall_s"], 3)}, "answer": (got["text"] or got["reasoning"])[:200]}


def tooluse(client: Client, args) -> dict:
    got = client.stream_chat({"model": args.model, "messages": [{"role": "user", "content": TOOL_ASK}],
                              "tools": [TOOL], "tool_choice": "auto", "max_tokens": args.max_tokens, "temperature": 0})
    detail = {"calls": got["calls"], "text": got["text"][:300], "finish": got["finish"]}
    if not got["calls"]:
        written = "read_file" in got["text"] and "{" in got["text"]
        raise Failed("no structured tool call" + (" (a call written as text: the server's tool parser or chat "
                                                  "template is not on, e.g. llama.cpp without --jinja)" if written
                                                  else f" (answered in prose: {got['text'][:120]!r})"))
    call = got["calls"][0]
    try:
        arguments = json.loads(call["arguments"] or "null")
    except ValueError:
        raise Failed(f"the tool call's arguments are not JSON: {call['arguments'][:200]!r}") from None
    if call["name"] != "read_file" or not isinstance(arguments, dict) or "path" not in arguments:
        raise Failed(f"the tool call is not read_file with a path: {call['name']!r} {call['arguments'][:200]!r}")
    return {"metrics": {"tooluse.smoke_ok": 1.0}, **detail}


def prompt_of(tokens: int, seed: int) -> str:
    """~`tokens` seeded words, uniquely tagged (no prefix-cache flattery across runs)."""
    rng = random.Random(seed)
    tag = f"[smoke {os.getpid()}-{time.time_ns()}]"
    words = " ".join(rng.choice(WORDS) for _ in range(max(1, tokens - 40)))
    return f"{tag} {words}\nCount to twenty in words, separated by spaces."


def throughput(client: Client, args) -> dict:
    got = client.stream_chat({"model": args.model, "messages": [{"role": "user", "content":
                                                                    prompt_of(args.prompt_tokens, args.seed)}],
                              "max_tokens": args.output_tokens, "temperature": 0, "ignore_eos": True})
    if got["first_s"] is None:
        raise Failed("the answer streamed no token")
    usage = got["usage"] or {}
    prompt_tokens = usage.get("prompt_tokens")
    out_tokens = usage.get("completion_tokens") or got["chunks"]
    decode_s = (got["last_s"] or 0) - got["first_s"]
    return {"metrics": {"throughput.ttft_s": round(got["first_s"], 4),
                        "throughput.prefill_tps": round(prompt_tokens / got["first_s"], 2)
                        if prompt_tokens and got["first_s"] > 0 else None,
                        "throughput.decode_tps": round((out_tokens - 1) / decode_s, 2)
                        if out_tokens and out_tokens > 1 and decode_s > 0 else None},
            "prompt_tokens": prompt_tokens, "output_tokens": out_tokens,
            "tokens_from": "usage" if usage.get("completion_tokens") else "streamed chunks"}


def judge(client: Client, args) -> dict:
    path = Path(args.judge_tasks)
    try:
        tasks = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise Broken(f"cannot read the judge tasks {path}: {exc}") from None
    answers, empty = [], 0
    for task in tasks[:args.judge_items]:
        prompt = task.get("prompt") or task.get("question") or ""
        got = client.stream_chat({"model": args.model, "messages": [{"role": "user", "content": prompt}],
                                  "max_tokens": args.max_tokens, "temperature": 0})
        empty += not got["text"].strip()
        answers.append({"id": task.get("id"), "answer": got["text"], "reasoning_chars": len(got["reasoning"])})
    if answers and empty * 4 > len(answers):
        raise Failed(f"{empty} of {len(answers)} judge answers were empty")
    return {"metrics": {"judge.answers": float(len(answers))}, "answers": answers,
            "note": "generation only: the judge's grading is the full pipeline's second pass"}


def _api(client: Client) -> str:
    status, text = client.get("/props")
    if status == 200 and '"build_info"' in text:
        return "llamacpp"
    status, text = client.get("/version")
    if status == 200 and '"version"' in text:
        return "vllm"
    raise Broken(f"{client.root} answers neither llama.cpp's /props nor vLLM's /version: name --kl-api")


def _tokens(client: Client, api: str, model: str, text: str) -> list[int]:
    body = {"content": text, "add_special": False} if api == "llamacpp" else \
        {"model": model, "prompt": text, "add_special_tokens": False}
    tokens = client.post_json("/tokenize", body).get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(x, int) for x in tokens):
        raise Broken(f"{client.root}/tokenize did not answer a list of token ids")
    return tokens


def _next_tokens(client: Client, api: str, model: str, tokens: list[int], first: int, last: int,
                 k: int) -> list[dict[int, float]]:
    """The top-k {token id: logprob} of the token after tokens[:j], for j = first..last."""
    try:
        if api == "llamacpp":
            out = []
            for j in range(first, last + 1):
                doc = client.post_json("/completion", {"prompt": tokens[:j], "n_predict": 1, "n_probs": k,
                                                       "cache_prompt": True, "temperature": 0})
                out.append({int(x["id"]): float(x["logprob"]) for x in doc["completion_probabilities"][0]["top_logprobs"]})
            return out
        doc = client.post_json("/v1/completions", {"model": model, "prompt": tokens[:last + 1], "max_tokens": 1,
                                                   "temperature": 0, "prompt_logprobs": k})
        per = doc["choices"][0]["prompt_logprobs"][1:]
        return [dict(sorted(((int(x), float(v["logprob"])) for x, v in e.items()), key=lambda z: -z[1])[:k])
                for e in per][first - 1:last]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise Broken(f"{client.root} answered no top-k logprobs ({api}: n_probs / prompt_logprobs)") from None


def _complete(top: dict, union: list) -> list[float]:
    """divergence.py's completion: a token missing from one side's top-k gets that side's tail
    estimate (at most its k-th probability and an equal share of the leftover), the rest one bucket."""
    probs = {x: math.exp(lp) for x, lp in top.items()}
    missing = [x for x in union if x not in probs]
    rest = max(0.0, 1.0 - sum(probs.values()))
    share = min(min(probs.values()), rest / (len(missing) + 1)) if missing and probs else 0.0
    vec = [max(v, EPS) for v in [probs.get(x, share) for x in union] + [max(rest - share * len(missing), 0.0)]]
    total = sum(vec)
    return [v / total for v in vec]


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def divergence(reference: dict, candidate: dict) -> tuple[float, float, bool]:
    """(symmetric KL, JS, top-1 agreement) of two top-k maps of the same position."""
    union = list(dict.fromkeys([*reference, *candidate]))
    p, q = _complete(reference, union), _complete(candidate, union)
    m = [(a + b) / 2 for a, b in zip(p, q)]
    return ((_kl(p, q) + _kl(q, p)) / 2, (_kl(p, m) + _kl(q, m)) / 2,
            max(reference, key=reference.get) == max(candidate, key=candidate.get))


def kl(client: Client, args) -> dict:
    if not args.kl_reference:
        return {"status": "skipped", "reason": "no --kl-reference (a second server: a reference quantization of "
                                               "the same weights)"}
    ref = Client(args.kl_reference, os.environ.get(args.kl_reference_key_env) if args.kl_reference_key_env else None,
                 args.timeout)
    apis = (_api(client), _api(ref)) if args.kl_api == "auto" else (args.kl_api, args.kl_api)
    ref_model = args.kl_reference_model or first_model(ref)
    try:
        prompts = [json.loads(line)["text"] for line in Path(args.kl_prompts).read_text(encoding="utf-8").splitlines()
                   if line.strip()][:args.kl_limit]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Broken(f"cannot read the KL prompts {args.kl_prompts}: {exc}") from None
    rows = []
    for n, text in enumerate(prompts, 1):
        tokens = _tokens(client, apis[0], args.model, text)
        if tokens != _tokens(ref, apis[1], ref_model, text):
            raise Broken(f"prompt {n}: the two servers tokenize it differently: not the same tokenizer, KL refused")
        first, last = args.kl_skip + 1, min(args.kl_skip + args.kl_positions, len(tokens) - 1)
        if last < first:
            continue
        cand = _next_tokens(client, apis[0], args.model, tokens, first, last, args.kl_top_k)
        refd = _next_tokens(ref, apis[1], ref_model, tokens, first, last, args.kl_top_k)
        rows += [divergence(r, c) for r, c in zip(refd, cand)]
    if not rows:
        raise Broken("no position to compare (prompts shorter than --kl-skip)")
    n = len(rows)
    sym = [r[0] for r in rows]
    mean = sum(sym) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in sym) / (n - 1) / n) if n > 1 else None
    top1 = sum(r[2] for r in rows) / n
    return {"metrics": {"kl.sym_kl_mean": mean, "kl.js_mean": sum(r[1] for r in rows) / n, "kl.top1_agreement": top1},
            "sym_kl_se": se, "positions": n, "prompts": len(prompts), "apis": {"served": apis[0], "reference": apis[1]},
            "reference": {"url": ref.root, "model": ref_model}}


RUN = {"telemetry": telemetry, "warmup": warmup, "tooluse": tooluse, "throughput": throughput, "judge": judge, "kl": kl}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # a usage error is a pipeline error (3): the contract reads 2 as FAIL
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(PIPELINE_ERROR)


def first_model(client: Client) -> str:
    status, text = client.get("/v1/models")
    try:
        ids = [m["id"] for m in json.loads(text)["data"]] if status == 200 else []
    except (ValueError, KeyError, TypeError):
        ids = []
    if not ids:
        raise Broken(f"GET /v1/models listed no model (HTTP {status}): name one with --model")
    return ids[0]


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="smoke.py", description="seed 003's bare-stdlib fitness smoke")
    p.add_argument("--base-url", required=True, help="the server's URL (with or without /v1)")
    p.add_argument("--model", default="", help="served model (default: the first /v1/models lists)")
    p.add_argument("--phases", default="", help=f"comma-separated, from {','.join(PHASES)} (default: "
                   f"{','.join(DEFAULT_PHASES)}, and kl with --kl-reference)")
    p.add_argument("--api-key-env", default="", help="NAME of the variable holding the API key")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--judge-items", type=int, default=2)
    p.add_argument("--judge-tasks", default=str(Path(__file__).with_name("judge_tasks.jsonl")))
    p.add_argument("--kl-reference", default="", help="the reference server's URL (kl)")
    p.add_argument("--kl-reference-model", default="")
    p.add_argument("--kl-reference-key-env", default="", help="NAME of the variable holding its key")
    p.add_argument("--kl-api", default="auto", choices=("auto", "llamacpp", "vllm"))
    p.add_argument("--kl-prompts", default=str(Path(__file__).with_name("kl_prompts.jsonl")))
    p.add_argument("--kl-limit", type=int, default=2, help="prompts, the first N")
    p.add_argument("--kl-positions", type=int, default=16, help="positions per prompt, at most")
    p.add_argument("--kl-skip", type=int, default=4, help="first positions (too little context), not compared")
    p.add_argument("--kl-top-k", type=int, default=20)
    p.add_argument("--seed", type=int, default=20260929)
    p.add_argument("--timeout", type=float, default=600, help="seconds per request")
    p.add_argument("--out", default="", help="write the results JSON here")
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    args = p.parse_args(argv)
    default = ",".join(DEFAULT_PHASES + (("kl",) if args.kl_reference else ()))
    phases = [x.strip() for x in (args.phases or default).split(",") if x.strip()]
    for flag in ("kl_limit", "kl_positions", "kl_top_k", "judge_items", "prompt_tokens", "output_tokens", "max_tokens"):
        if not 1 <= getattr(args, flag) <= 1_000_000:
            p.error(f"--{flag.replace('_', '-')} must be 1 to 1000000")
    if not 0 <= args.kl_skip <= 1_000_000:
        p.error("--kl-skip must be 0 to 1000000")
    if args.kl_reference and not re.match(r"^https?://", args.kl_reference):
        p.error(f"--kl-reference {args.kl_reference!r} is not an http(s) URL")
    unknown = [x for x in phases if x not in PHASES]
    if unknown or not phases:
        p.error(f"unknown phase {unknown[0]!r}" if unknown else "no phase named")  # exits 3
    if phases == ["kl"] and not args.kl_reference:
        p.error("--phases kl without --kl-reference measures nothing: name the reference server, or more phases")
    if not re.match(r"^https?://", args.base_url):
        p.error(f"--base-url {args.base_url!r} is not an http(s) URL")
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            p.error(f"--api-key-env {args.api_key_env}: that variable is not set (export it first)")
    client = Client(args.base_url, key, args.timeout)
    results = {"tool": "llms-benchmark fitness smoke (stdlib)", "python": sys.version.split()[0],
               "base_url": client.root, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "phases": []}
    code = PASS
    try:
        args.model = args.model or first_model(client)
    except Broken as exc:
        results["phases"].append({"name": "discover", "status": "error", "reason": str(exc)})
        print(f"smoke: error: {exc}", file=sys.stderr)
        phases, code = [], PIPELINE_ERROR
    results["model"] = args.model
    for name in phases:
        t0 = time.monotonic()
        try:
            doc = RUN[name](client, args)
            entry = {"name": name, "status": doc.pop("status", "ran"), **doc}
        except Failed as exc:
            entry, code = {"name": name, "status": "fail", "reason": str(exc)}, max(code, FAIL)
        except Broken as exc:
            entry, code = {"name": name, "status": "error", "reason": str(exc)}, PIPELINE_ERROR
        entry["wall_s"] = round(time.monotonic() - t0, 3)
        results["phases"].append(entry)
        print(f"smoke {name}: {entry['status']} {entry['wall_s']:.1f}s"
              + (f" - {entry['reason']}" if entry.get("reason") else "")
              + "".join(f" {k}={v}" for k, v in (entry.get("metrics") or {}).items()), file=sys.stderr)
    if code == PASS and not any(e["status"] == "ran" for e in results["phases"]):
        # every phase skipped: nothing was measured, and that is never a PASS
        print("smoke: error: no phase measured anything", file=sys.stderr)
        code = PIPELINE_ERROR
    results["exit_code"] = code
    results["verdict"] = {PASS: "PASS", FAIL: "FAIL"}.get(code)  # the seed's set: null on a pipeline error
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
