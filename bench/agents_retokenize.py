"""Why a fed turn can prefill more than the agent's did (issue 37, realism): does the answer a
replayed turn got, sent back as text, tokenise to the tokens the server generated?

The server's prefix cache holds the prompt and the generated token ids. The next turn sends the
answer back as text (as an agent does: the chat API takes no token ids), and the server tokenises
it again; the cache matches only up to the first token that differs. A replayed answer is
forced to the recorded length (`ignore_eos`) on a synthetic prompt, and greedy decoding then often
writes a tokenisation that is not the tokeniser's own (" water" + "ing", where the text tokenises
as " watering"), or, on llama.cpp, where `ignore_eos` masks the end-of-generation tokens, a
special token such as `<|im_start|>` that the stream's text leaves out.

For each of `--answers` synthetic prompts (a committed trace's first turn, each copy's own words,
`--words` long), one answer of `--tokens` is asked, streamed with logprobs so that the generated
ids come back (llama.cpp: each entry's `id`; vLLM: `return_tokens_as_token_ids`), and its text is
tokenised again on the same server. Reported: how many answers come back token for token, and for
the others where the first difference falls.

    .venv/bin/python bench/agents_retokenize.py --base-url URL --model NAME [--answers 8 --tokens 105]

Talks only to the server given (loopback in this project's use).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.load.agents.synth import Synth  # noqa: E402
from harness.load.agents.trace import load  # noqa: E402

TRACE = REPO / "bench" / "results" / "traces" / "20261204T163620Z-cpu-qwen2-5-coder-1-5b-medium-a39b.trace.jsonl"


def _ids(entry: dict) -> int:
    if isinstance(entry.get("id"), int):  # llama.cpp
        return entry["id"]
    return int(str(entry["token"]).split(":", 1)[1])  # vLLM's "token_id:N"


def answer(client: httpx.Client, model: str, prompt: str, tokens: int, keep_special: bool = False
           ) -> tuple[list[int], str, int]:
    body = {**({"skip_special_tokens": False} if keep_special else {}), "model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
            "logprobs": True, "return_tokens_as_token_ids": True}
    ids, text, completion = [], [], 0
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            completion = (event.get("usage") or {}).get("completion_tokens", completion)
            for choice in event.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
                ids += [_ids(e) for e in ((choice.get("logprobs") or {}).get("content") or [])]
    return ids, "".join(text), completion


def tokenize(client: httpx.Client, model: str, text: str) -> list[int]:
    r = client.post("/tokenize", json={"content": text, "add_special": False})  # llama.cpp
    if r.status_code == 200 and "tokens" in r.json():
        return r.json()["tokens"]
    r = client.post("/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})  # vLLM
    r.raise_for_status()
    return r.json()["tokens"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--answers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=105, help="each answer's length (ignore_eos)")
    ap.add_argument("--words", type=int, default=400, help="each synthetic prompt's words")
    ap.add_argument("--keep-special", action="store_true",
                    help="ask for special tokens in the text (vLLM's skip_special_tokens=false; llama.cpp has none)")
    args = ap.parse_args(argv)
    trace = load(TRACE)
    session = trace.sessions[0]
    same, firsts, lost = 0, [], []
    with httpx.Client(base_url=args.base_url, timeout=600) as client:
        for copy in range(min(args.answers, 64)):
            prompt = " ".join(Synth(trace, copy=copy).words(session.id, 0)[:args.words])
            ids, text, completion = answer(client, args.model, prompt, args.tokens, args.keep_special)
            back = tokenize(client, args.model, text)
            first = next((i for i, (a, b) in enumerate(zip(ids, back)) if a != b), min(len(ids), len(back)))
            exact = back == ids
            same += exact
            if not exact:
                firsts.append(first)
                lost.append(completion - first)
            print(f"copy {copy}: {completion} generated, {len(ids)} ids streamed, text retokenised to {len(back)}; "
                  + ("token for token" if exact else f"first difference at token {first}"), flush=True)
    print(f"\n{same}/{min(args.answers, 64)} answers tokenise back token for token; where not, the first "
          f"difference at tokens {firsts}: the next turn's cache match ends there, {lost} answer tokens "
          "prefilled again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
