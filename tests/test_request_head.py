"""The request's head read as its body streams (harness/wire/request_head.py): the same reading
as json.loads of the whole body, cut anywhere, and nothing of the body kept."""

from __future__ import annotations

import json
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.wire.request_head import MODEL_CAP, RequestHead

# Strings that make a scanner's life hard: quotes, backslashes, brackets, escapes, non-ASCII.
TEXT = st.text(alphabet=st.sampled_from(list('ab"\\{}[],: \n\t\u00e9\u4e2d\U0001f600\x01/')), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.one_of(TEXT, st.sampled_from(["model", "stream", "messages", "tools"])),
                                        inner, max_size=4), max_leaves=12)
KEYS = st.one_of(st.sampled_from(["model", "stream", "messages", "tools", "stream_options", "mode", "tool"]), TEXT)
BODIES = st.dictionaries(KEYS, VALUES, max_size=7)


def expected(body: dict) -> dict:
    """What the wire log recorded from json.loads of the whole body."""
    model, stream, messages, tools = (body.get(k) for k in ("model", "stream", "messages", "tools"))
    return {"model": model if isinstance(model, str) else None,
            "stream": stream if isinstance(stream, bool) else None,
            "messages": len(messages) if isinstance(messages, list) else None,
            "tools": len(tools) if isinstance(tools, list) else 0}


def read(raw: bytes, cuts: list[int]) -> dict | None:
    head = RequestHead()
    last = 0
    for cut in sorted({min(c, len(raw)) for c in cuts}):
        head.feed(raw[last:cut])
        last = cut
    head.feed(raw[last:])
    return head.result()


@settings(max_examples=400, deadline=None)
@given(body=BODIES, ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]),
       cuts=st.lists(st.integers(0, 4000), max_size=40))
def test_it_reads_what_json_loads_reads_wherever_the_body_is_cut(body, ascii_only, indent, cuts):
    raw = json.dumps(body, ensure_ascii=ascii_only, indent=indent).encode()
    assert read(raw, cuts) == expected(json.loads(raw))


@given(body=BODIES)
def test_one_byte_at_a_time(body):
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert read(raw, list(range(len(raw)))) == expected(body)


def test_escaped_keys_duplicates_and_nested_look_alikes():
    raw = (b'{"\\u006dodel": "a\\"b", "messages": [1, [2, 3], {"messages": [9, 9, 9]}], '
           b'"stream": {"stream": true}, "tools": "x", "nested": {"model": "not this", "tools": [1]}, '
           b'"messages": [[], "\\\\", {}], "tools": [null, false]}')
    loaded = json.loads(raw)
    assert read(raw, [7, 8, 9, 40, 41, 100]) == expected(loaded) == {
        "model": 'a"b', "stream": None, "messages": 3, "tools": 2}


def test_what_is_not_one_complete_object_reads_as_none():
    for raw in (b"", b"   ", b"[1, 2]", b'"text"', b"12", b"true", b'{"a": 1', b'{"a": "x}',
                b'{"a": 1}}', b'{"a": 1} x', b'{"a": 1} {}', b"x" * 1000):
        assert read(raw, [1, 3]) is None, raw
    assert read(b' {"stream": true} \n', []) == {"model": None, "stream": True, "messages": None, "tools": 0}


def test_a_long_model_name_or_key_is_not_kept():
    name = "m" * (MODEL_CAP + 1)
    assert read(json.dumps({"model": name, "messages": []}).encode(), [5, 600, 1100])["model"] is None
    key = "messages" + " " * 100
    assert read(json.dumps({key: [1], "tools": [1]}).encode(), []) == {
        "model": None, "stream": None, "messages": None, "tools": 1}


def test_an_endless_body_is_read_without_being_kept():
    """32 MiB streamed into one string (what an agent on the model port can send): what the
    reader keeps stays under a few KiB; the same body cut mid-escape still reads right."""
    head = RequestHead()
    chunk = b'x\\"' * 21845 + b"\\"  # each chunk ends mid-escape: the next one starts with its byte
    tracemalloc.start()
    try:
        head.feed(b'{"model": "m", "messages": [{"role": "user", "content": "')
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(512):
            head.feed(chunk)
            head.feed(b"n")
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert kept < 16 << 10, kept
    assert head.result() is None  # still inside the string
    head.feed(b'"}, {"role": "assistant"}], "stream": false}')
    assert head.result() == {"model": "m", "stream": False, "messages": 2, "tools": 0}


def test_its_patterns_use_no_possessive_quantifier_nor_atomic_group():
    """CPython before 3.11.5 (Debian 12 ships 3.11.2) matched those wrongly (gh-106052): with
    them, this reader misread cut bodies there while passing every test on a newer Python."""
    from re import _constants as c, _parser

    from harness.wire import request_head

    def ops(tree):
        for op, av in tree:
            yield op
            for sub in (av if isinstance(av, (list, tuple)) else [av]):
                if isinstance(sub, _parser.SubPattern):
                    yield from ops(sub)
                elif isinstance(sub, (list, tuple)):
                    for part in sub:
                        if isinstance(part, _parser.SubPattern):
                            yield from ops(part)

    patterns = [v for v in vars(request_head).values() if hasattr(v, "pattern") and hasattr(v, "match")]
    assert len(patterns) == 3
    for pattern in patterns:
        found = set(ops(_parser.parse(pattern.pattern, pattern.flags)))
        assert not found & {c.POSSESSIVE_REPEAT, c.ATOMIC_GROUP}, pattern.pattern
