"""The per-turn join (harness/serving/join.py) on hand-made timelines: which counter deltas a
call gets, and when they are its own (`exact`) or hold another call's work too (`shared`).

The case that matters: a loaded box answers the reading asked for at a step's end after the
next call has already been served. That reading shows nothing running and every counter whole,
so by the opencode-side times alone it looks like a clean boundary; the server's own count of
finished requests says two calls are inside."""

from __future__ import annotations

from harness.serving.join import server_side
from harness.serving.turns import Turn


def turn(message: str, created: float, completed: float, prompt: int = 100, output: int = 10) -> Turn:
    return Turn(message=message, session="s", created=created, completed=completed, prompt=prompt, cached=0,
                output=output, reasoning=0, finish="tool-calls", mode="build", summary=False, error=None)


def vllm(t: float, reason: str, finished: int, prompt: int, generated: int, running: int = 0,
         after: str | None = None, counted: bool = True) -> dict:
    r = {"t": t, "reason": reason, "running": running, "prompt_tokens_total": prompt,
         "generation_tokens_total": generated, "extra": {"vllm:e2e_request_latency_seconds_count": finished}}
    if counted:
        r["extra"]["vllm:request_success_total"] = finished
    if after:
        r["after"] = after
    return r


def llamacpp(t: float, reason: str, prompt: int, generated: int, after: str | None = None) -> dict:
    r = {"t": t, "reason": reason, "running": 0, "prompt_tokens_total": prompt, "generation_tokens_total": generated}
    if after:
        r["after"] = after
    return r


# Two sequential calls: m1 runs 1.0-2.0, m2 is created 2.01 and completes 3.0.
TURNS = [turn("m1", 1.0, 2.0, 100, 10), turn("m2", 2.01, 3.0, 200, 20)]


def test_a_step_reading_between_the_calls_gives_each_its_own_deltas():
    readings = [vllm(0.5, "start", 0, 0, 0), vllm(2.005, "step", 1, 100, 10, after="m1"),
                vllm(3.1, "step", 2, 300, 30, after="m2")]
    one, two = (server_side(t, TURNS, readings) for t in TURNS)
    assert (one.attribution, one.prompt_tokens, one.generation_tokens) == ("exact", 100, 10)
    assert (two.attribution, two.prompt_tokens, two.generation_tokens) == ("exact", 200, 20)


def test_a_step_reading_answered_after_the_next_call_was_served_is_shared():
    # m1's step reading is stamped 2.4 (asked), but its answer holds m2's whole call: the server
    # counts two finished requests since the start. By the stored times alone m2 (still open at
    # 2.4 in opencode's store) looked "not yet counted", and m1 got 300 prompt tokens as exact.
    readings = [vllm(0.5, "start", 0, 0, 0), vllm(2.4, "step", 2, 300, 30, after="m1"),
                vllm(3.1, "step", 2, 300, 30, after="m2")]
    one = server_side(TURNS[0], TURNS, readings)
    assert (one.attribution, one.shared_with, one.prompt_tokens) == ("shared", 1, 300)
    # m2's bracket (m1's late reading to its own) holds no finished request: nothing fits it.
    assert server_side(TURNS[1], TURNS, readings).attribution == "none"


def test_the_e2e_histogram_counts_where_the_success_counter_is_absent():
    readings = [vllm(0.5, "start", 0, 0, 0, counted=False), vllm(2.4, "step", 2, 300, 30, after="m1", counted=False)]
    one = server_side(TURNS[0], TURNS, readings)
    assert (one.attribution, one.shared_with) == ("shared", 1)


def test_one_finished_request_is_exact_even_when_the_next_call_was_already_created():
    # The reading came after m2 was created (2.01) but before its request reached the server.
    readings = [vllm(0.5, "start", 0, 0, 0), vllm(2.05, "step", 1, 100, 10, after="m1")]
    one = server_side(TURNS[0], TURNS, readings)
    assert (one.attribution, one.prompt_tokens) == ("exact", 100)


def test_a_title_request_inside_the_bracket_makes_it_shared():
    # A request opencode did not store as a turn (say, a title) finished inside m1's bracket.
    readings = [vllm(0.5, "start", 0, 0, 0), vllm(2.005, "step", 2, 140, 18, after="m1")]
    one = server_side(TURNS[0], TURNS, readings)
    assert (one.attribution, one.shared_with, one.prompt_tokens) == ("shared", 1, 140)


def test_without_a_request_count_the_times_decide():
    # llama.cpp: no finished-request counter. The same late reading reads as exact (the times'
    # rule: m2 was created after m1 ended and completed after the reading), which is why the
    # count is preferred wherever the server keeps one.
    late = [llamacpp(0.5, "start", 0, 0), llamacpp(2.4, "step", 300, 30, after="m1")]
    one = server_side(TURNS[0], TURNS, late)
    assert (one.attribution, one.prompt_tokens) == ("exact", 300)
    # Two steps ending before one reading: shared by the tags.
    both = [llamacpp(0.5, "start", 0, 0), llamacpp(3.1, "step", 300, 30, after="m1,m2")]
    assert server_side(TURNS[0], TURNS, both).attribution == "shared"
