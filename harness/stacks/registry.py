"""The stack that serves an environment, loaded by name from its spec (harness/stack_specs/catalog.py)
only when it serves: azure's SDK costs a quarter second, and an extra not installed is one
clear refusal.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from harness.stacks.base import Stack
from harness.stack_specs.catalog import NOT_YET, SPECS, canonical, get_spec  # noqa: F401 - the registry's face
from harness.stacks.unsupported import UnsupportedStack


def get_stack(name: str, root: Path) -> Stack:
    if canonical(name) in NOT_YET:
        return UnsupportedStack(name)
    module, _, cls = get_spec(name).implementation.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:  # a stack whose SDK is an extra (azure): one clear refusal
        from harness.extras import extra_of, missing

        extra = extra_of(exc)
        if extra is None:
            raise
        raise missing(extra, f"the {canonical(name)} stack", exc) from None
    return getattr(loaded, cls)(root)
