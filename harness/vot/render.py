"""Render a preset's `vllm_args` the way vllm-on-tap does.

`true` is a bare flag, `false` is omitted (an override's way to remove a flag),
anything else is `--flag value`. Shell lines single-quote every value; azure's
JSON args array carries every value as a JSON string, so a JSON value such as
`{"method": "mtp"}` reaches vLLM intact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _text(value: Any) -> str:
    # ints as ints, floats by repr (0.92 stays 0.92), strings untouched
    return repr(value) if isinstance(value, float) else str(value)


def argv(args: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for flag, value in args.items():
        if value is False:
            continue
        out.append(flag)
        if value is not True:
            out.append(_text(value))
    return out


def shell_quote(value: str) -> str:
    """vllm-on-tap's rule: wrap in single quotes, a `'` inside becomes `'\\''`."""
    return "'" + value.replace("'", "'\\''") + "'"


def shell_line(args: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for flag, value in args.items():
        if value is False:
            continue
        # flags match ^--[a-z0-9][a-z0-9-]*$ (schema), so they need no quoting
        parts.append(flag if value is True else f"{flag} {shell_quote(_text(value))}")
    return " ".join(parts)


def json_array(args: Mapping[str, Any]) -> str:
    return json.dumps(argv(args))
