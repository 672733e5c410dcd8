"""PNG plots of a load run: throughput and TTFT percentiles against concurrency, one line per shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v")


def _by_shape(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    shapes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        shapes.setdefault(row["shape"], []).append(row)
    return {s: sorted(rs, key=lambda r: r["concurrency"]) for s, rs in shapes.items()}


def _line(ax, rows: list[dict[str, Any]], key: str, label: str, marker: str, scale: float = 1.0) -> None:
    points = [(r["concurrency"], r[key] * scale) for r in rows if r.get(key) is not None]
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker=marker, label=label)


def plot(rows: list[dict[str, Any]], folder: Path, title: str) -> list[Path]:
    """throughput.png and ttft.png in `folder`; the paths written."""
    shapes = _by_shape(rows)
    written = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (shape, rs) in enumerate(shapes.items()):
        _line(axes[0], rs, "output_throughput_tok_s", shape, MARKERS[i % len(MARKERS)])
        _line(axes[1], rs, "request_throughput_rps", shape, MARKERS[i % len(MARKERS)])
    axes[0].set_ylabel("output tokens/s")
    axes[1].set_ylabel("requests/s")
    _finish(fig, axes, f"Throughput — {title}")
    written.append(_save(fig, folder / "throughput.png"))

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), sharey=True)
    for ax, p in zip(axes, ("p50", "p95", "p99")):
        for i, (shape, rs) in enumerate(shapes.items()):
            _line(ax, rs, f"ttft_{p}_s", shape, MARKERS[i % len(MARKERS)])
        ax.set_title(f"TTFT {p}")
    axes[0].set_ylabel("seconds")
    _finish(fig, axes, f"Time to first token — {title}")
    written.append(_save(fig, folder / "ttft.png"))
    return written


def _finish(fig, axes, title: str) -> None:
    for ax in axes:
        ax.set_xlabel("concurrency (requests in flight)")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(title="shape")
    fig.suptitle(title)
    fig.tight_layout()


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
