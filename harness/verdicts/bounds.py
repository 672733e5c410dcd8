"""The rule's memory, capped as a process: whatever a cited query builds (a string of gigabytes,
a cross join's hash table) or a findings.json holds, the process that re-runs them cannot grow
past RULE_MEMORY_CAP. DuckDB's own `memory_limit` bounds its buffers, not the strings a query
returns or materialises; an rlimit on the process's data bounds both, and DuckDB answers an
allocation it refuses with an Out of Memory error, which the cited query's check records.

RLIMIT_DATA rather than RLIMIT_AS: each open DuckDB reserves address space it never touches
(~70 MB of data per connection, more of address space), so the control stores are opened a
few at a time (`controls.Controls`) and the cap counts what is allocated, not what is mapped.
"""

from __future__ import annotations

import contextlib
import os

RULE_MEMORY_CAP = 1 << 30  # bytes of data the rule's process may hold
ENV = "LLMS_BENCHMARK_RULE_MEMORY"  # a machine that needs more may raise it (bytes)


def _data_now() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def cap_memory(limit: int | None = None) -> int | None:
    """Cap this process's data at `limit` bytes (RULE_MEMORY_CAP, or $LLMS_BENCHMARK_RULE_MEMORY),
    never below what it already holds plus 256 MB, never above the hard limit. The cap set, or
    None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    if limit is None:
        try:
            limit = int(os.environ.get(ENV, RULE_MEMORY_CAP))
        except ValueError:
            limit = RULE_MEMORY_CAP
    now = _data_now() or 0
    limit = max(limit, now + (256 << 20))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        return soft
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


@contextlib.contextmanager
def memory_capped(limit: int | None = None):
    """The cap for the rule's work only (a `with` or a decorator): the previous limit comes back
    on the way out. A process that goes on past the rule (a test runner calling the CLI
    in-process) would otherwise pass a 1 GiB data limit to everything it starts later: Bun
    (opencode) and llama-server die at start under it."""
    try:
        import resource
    except ImportError:  # not POSIX
        yield None
        return
    before = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        yield cap_memory(limit)
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)
