"""Prompt lengths exact on a server's own tokenizer (harness/load/agents/exact.py), against a
loopback fake of vLLM's /tokenize and of llama.cpp's /apply-template + /tokenize."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.load.agents.exact import counter, exact_prompts, fit
from harness.load.agents.synth import Synth
from harness.load.agents.trace import AgentTrace, Session, Turn

def render(messages: list[dict]) -> str:
    """A ChatML-like template of a whole chat, the generation prompt last."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def tokens(text: str) -> int:
    """A toy tokenizer: a word a token, but a bracketed tag 3 and every word over 4 letters 2."""
    return sum(3 if w.startswith("[") else 2 if len(w) > 4 else 1 for w in text.split())


def serve(kind: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if kind == "vllm" and self.path == "/tokenize" and "messages" in body:
                out = {"count": tokens(render(body["messages"]))}
            elif kind == "llamacpp" and self.path == "/apply-template":
                out = {"prompt": render(body["messages"])}
            elif kind == "llamacpp" and self.path == "/tokenize" and "content" in body:
                out = {"tokens": list(range(tokens(body["content"])))}
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def trace() -> AgentTrace:
    def turn(prompt, reused, think):
        return Turn(start_s=0, prompt_tokens=prompt, reused_blocks=reused, output_tokens=4, think_s=think)
    return AgentTrace(block_size=16, sessions=[
        Session(id="root", turns=[turn(300, 0, None), turn(420, 18, 0.1), turn(700, 26, 0.1)]),
        Session(id="task", parent="root", fork_after_turn=0, turns=[turn(90, 0, None), turn(150, 5, 0.1)])])


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
def test_each_turn_counts_exactly_its_recorded_tokens_and_keeps_its_prefix(kind):
    server = serve(kind)
    try:
        count = counter(f"http://127.0.0.1:{server.server_port}/v1", "m")
        assert count is not None
        t = trace()
        texts = exact_prompts(t, Synth(t, copy=1), count)
        for s in t.sessions:
            for i, turn in enumerate(s.turns):
                assert count(texts[(s.id, i)]) == turn.prompt_tokens, (s.id, i)
                assert texts[(s.id, i)].startswith(f"[a1-{s.id}] ")
            for i in range(1, len(s.turns)):  # the blocks it shares with the previous turn come first
                shared = s.turns[i].reused_blocks * t.block_size
                prev, cur = texts[(s.id, i - 1)].split(), texts[(s.id, i)].split()
                n = min(shared, len(prev))
                assert cur[:n] == prev[:n]
    finally:
        server.shutdown()


def test_a_server_without_a_tokenizer_endpoint_gives_none():
    server = serve("none")
    try:
        assert counter(f"http://127.0.0.1:{server.server_port}", "m") is None
    finally:
        server.shutdown()


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
def test_a_fed_turn_counts_exactly_its_recorded_tokens_with_the_answer_inside(kind):
    """feed_answers sizes a turn as the previous messages, the answer, then new words: the server's
    count of that whole chat (template, the answer's own tokens) meets the recorded prompt tokens."""
    server = serve(kind)
    try:
        count = counter(f"http://127.0.0.1:{server.server_port}/v1", "m")
        t = trace()
        synth = Synth(t, copy=0)
        first = exact_prompts(t, synth, count)[("root", 0)]
        base = [{"role": "user", "content": first},
                {"role": "assistant", "content": "```json\n{\"name\": \"bash\", \"arguments\": {}}\n```"}]
        words = synth.words("root", 1)[t.sessions[0].turns[0].prompt_tokens:]
        made, got, used = fit(words, 420, count, lambda text: [*base, {"role": "user", "content": text}], 100)
        assert got == 420 and count(made) == 420
        assert made[:2] == base and made[2]["role"] == "user" and 0 < used <= len(words)
    finally:
        server.shutdown()
