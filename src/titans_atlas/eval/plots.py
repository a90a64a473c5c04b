"""PNG plots of results: a heatmap (accuracy over two axes) and line curves. matplotlib is
an optional dependency (``[eval]`` extra), imported only when a plot is drawn, with the
non-interactive Agg backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .extras import require


def _pyplot():
    matplotlib = require("matplotlib", "drawing evaluation plots")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def heatmap(
    values: Sequence[Sequence[float | None]],
    row_labels: Sequence[str],
    column_labels: Sequence[str],
    path: str | Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    vmax: float = 100.0,
) -> Path:
    """Rows x columns of scores (None: no sample) as a red-to-green heatmap, numbers written
    in the cells."""
    plt = _pyplot()
    grid = [[float("nan") if v is None else v for v in row] for row in values]
    width = max(4.0, 0.9 * len(column_labels) + 2.5)
    fig, ax = plt.subplots(figsize=(width, max(2.5, 0.5 * len(row_labels) + 1.8)))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(column_labels)), labels=list(column_labels))
    ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if value == value:  # not NaN
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax)
    return _save(fig, plt, path)


def curves(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    path: str | Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    vlines: Sequence[tuple[float, str]] = (),
) -> Path:
    """One line per ``name -> (xs, ys)``; ``vlines`` marks positions (e.g. the window)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", markersize=3, label=name)
    for x, text in vlines:
        ax.axvline(x, color="grey", linestyle="--", linewidth=1)
        ax.annotate(text, (x, 1), xycoords=("data", "axes fraction"), fontsize=8, va="top")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, plt, path)


def _save(fig, plt, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def length_label(tokens: int) -> str:
    """1024 -> "1K", 65536 -> "64K", 1000 -> "1000"."""
    if tokens >= 1024 and tokens % 1024 == 0:
        return f"{tokens // 1024}K"
    return str(tokens)


def plot_title(result: dict, detail: str = "") -> str:
    """A result's plot title: its label (with `` (detail)``), then the checkpoint's name on a
    second line when the result names one."""
    label = f"{result['label']} ({detail})" if detail else result["label"]
    return f"{label}\n{result.get('checkpoint', {}).get('name', '')}".strip()
