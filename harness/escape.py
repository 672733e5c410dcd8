"""One escape for every string that came from the agent's side (files, names, errors, opencode's
output) before it reaches a reason, a record field or the terminal (issue 60): control
characters shown as escapes, never written raw. A leaf module: records/ and sandbox/ import it.
Idempotent: an escape is plain text, escaping it again changes nothing."""

from __future__ import annotations

import re

# Control characters, and the lone surrogates Python decodes a non-UTF-8 name's bytes to
# (they would crash the record's UTF-8 save: `post-run crashes, run.json still ok`).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_NAME_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character but newline and tab shown as an escape: a file name
    or a model's text printed raw could retitle the terminal or write its clipboard (OSC 0/52);
    a byte that was not UTF-8 shown as its escape, so the text always saves as UTF-8."""
    return _CONTROLS.sub(_escaped, text)


def escape_name(text: str) -> str:
    """A name from the agent's side (a file, a folder, a path) as one printable line: every
    control character escaped, newline and tab included (a name holding a newline forges a
    line on the terminal), bidi overrides too, bytes that were not UTF-8 as their escapes."""
    return _NAME_CONTROLS.sub(_escaped, text)




_BREAKS = re.compile(r"[\t\n\v\f\r\u0085\u2028\u2029]+")


def one_line(text: str) -> str:
    """`text` as one printable line: each run of line breaks and tabs one space (a reason composed
    over lines stays readable), every other control character escaped (`escape_name`)."""
    return escape_name(_BREAKS.sub(" ", text))
