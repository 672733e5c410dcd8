"""The trend of one model's metrics over its runs: a PNG, one panel per metric, ±2·SE bars
where the run gives an SE, flagged runs (regression or drift) in red."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

MAX_PANELS = 24  # a figure stays readable; the rest are in the terminal table and the JSON


def metrics_of(runs: list[dict[str, Any]], only: list[str] | None = None) -> list[str]:
    keys = sorted({k for r in runs for k, v in r["metrics"].items() if isinstance(v, (int, float))})
    return [k for k in keys if not only or any(k == o or k.startswith(o + "@") or k.startswith(o + ".") for o in only)]


def draw(runs: list[dict[str, Any]], model: str, path: Path, only: list[str] | None = None) -> Path | None:
    """Write the figure to `path`; None when no metric has a value."""
    keys = metrics_of(runs, only)[:MAX_PANELS]
    if not keys:
        return None
    try:
        import matplotlib
    except ImportError as exc:  # the `plots` extra: the tables are printed, no PNG
        from harness.extras import missing

        raise missing("plots", "the trend plot", exc) from None

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot as plt

    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        xs, ys, errs, bad = [], [], [], []
        for i, r in enumerate(runs, 1):
            v = r["metrics"].get(key)
            if not isinstance(v, (int, float)):
                continue
            xs.append(i)
            ys.append(v)
            errs.append(2 * (r.get("se") or {}).get(key, 0.0))
            if any(f["metric"] == key for f in r.get("regressions") or []):
                bad.append((i, v))
        ax.errorbar(xs, ys, yerr=errs, marker="o", ms=4, lw=1, capsize=3)
        if bad:
            ax.scatter([b[0] for b in bad], [b[1] for b in bad], color="red", zorder=3, s=40, label="flagged")
            ax.legend(fontsize=7, loc="best")
        ax.set_title(key, fontsize=8)
        ax.set_xticks(xs)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(f"{model}: {len(runs)} runs (x: run number; bars ±2·SE)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    tmp.replace(path)  # whole or not at all
    return path
