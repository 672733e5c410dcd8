"""Rich progress for a load run: one bar per level, a line per finished level.

It redraws twice a second from counters the requests bump, so drawing costs the
timed streams next to nothing.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.load.client import Result
from harness.load.runner import Reporter


class RichReporter(Reporter):
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                 console=console, refresh_per_second=2, transient=True)
        self.task = None

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def note(self, message: str) -> None:
        self.progress.console.print(f"[dim]load[/dim] {message}", highlight=False)

    def level_started(self, shape: str, level: int, total: int | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.failed = 0
        self.task = self.progress.add_task(f"{shape} c={level}", total=total, failed=0)

    def request_done(self, result: Result) -> None:
        if self.task is not None:
            if not result.ok:
                self.failed += 1
            self.progress.update(self.task, advance=1, failed=self.failed)

    def level_done(self, row: dict[str, Any]) -> None:
        def f(value: Any, fmt: str) -> str:
            return format(value, fmt) if value is not None else "-"

        self.progress.console.print(
            f"  {row['shape']} c={row['concurrency']} ok={row['succeeded']}/{row['requests']} "
            f"ttft p50={f(row['ttft_p50_s'], '.3f')}s p95={f(row['ttft_p95_s'], '.3f')}s "
            f"out={f(row['output_throughput_tok_s'], ',.0f')} tok/s itl p50={f(row['itl_p50_ms'], '.1f')}ms "
            f"preempt={f(row['preemptions'], 'g')}", highlight=False)
