"""The server's own account of a level: its /metrics read before, during and after.

A thread (not the replay's loop, whose timers must stay free) reads /metrics every
`interval_s` with harness/load/metrics.py's scraper; a level's figures are the counters'
growth between the first and last reading (prefix-cache hit rate = hits / queries,
preemptions) and the peaks seen between (KV-cache usage, requests waiting). A server without
/metrics gives None for each, never an error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from harness.load.metrics import MetricsSnapshot, delta, scrape

MAX_READINGS = 100_000  # a level of a day at one a second


@dataclass
class ServerFigures:
    prefix_cache_hit: float | None = None  # 0..1 over the level
    preemptions: float | None = None
    kv_usage_peak: float | None = None  # 0..1
    waiting_peak: float | None = None
    readings: int = 0


class Watcher:
    def __init__(self, base_url: str, *, api_key: str | None = None, interval_s: float = 1.0) -> None:
        self.base_url, self.api_key, self.interval_s = base_url, api_key, interval_s
        self._stop = threading.Event()
        self._snaps: list[MetricsSnapshot] = []
        self._thread = threading.Thread(target=self._loop, name="agents-metrics", daemon=True)

    def _read(self) -> None:
        snap = scrape(self.base_url, api_key=self.api_key, timeout=min(2.0, max(0.2, self.interval_s)),
                      figures_only=True)
        if snap is not None and len(self._snaps) < MAX_READINGS:
            self._snaps.append(snap)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> Watcher:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._read()

    def figures(self) -> ServerFigures:
        snaps = self._snaps
        if not snaps:
            return ServerFigures()
        first, last = snaps[0], snaps[-1]
        hits, queries = delta(first, last, "prefix_cache_hits_total"), delta(first, last, "prefix_cache_queries_total")

        def peak(name: str) -> float | None:
            seen = [getattr(s, name) for s in snaps if getattr(s, name) is not None]
            return max(seen) if seen else None
        return ServerFigures(prefix_cache_hit=round(hits / queries, 4) if hits is not None and queries else None,
                             preemptions=delta(first, last, "preemptions_total"), kv_usage_peak=peak("kv_usage"),
                             waiting_peak=peak("waiting"), readings=len(snaps))
