"""Per-seed recall of the recall-task sweep (``research/recall_seeds.py``'s JSON lines), one
panel per metric, one group of bars per (tag, model): docs/results/recall_seeds.png.

    python research/plot_recall_seeds.py [--rows research/results/recall_seeds.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="research/results/recall_seeds.jsonl")
    parser.add_argument("--out", default="docs/results/recall_seeds.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines()]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(f"{row['model']} ({row['tag']}, {row['steps']} steps)", []).append(row)
    metrics = (("d64", "8 windows back"), ("x16", "16x the training length"))
    figure, axes = plt.subplots(1, 2, figsize=(11, 0.5 + 0.45 * len(groups)), sharey=True)
    for axis, (key, title) in zip(axes, metrics, strict=True):
        for y, members in enumerate(groups.values()):
            members = sorted(members, key=lambda r: r["seed"])
            xs = [100 * r[key] for r in members]
            axis.scatter(xs, [y] * len(xs), s=40, alpha=0.7)
            for r, x in zip(members, xs, strict=True):
                axis.annotate(str(r["seed"]), (x, y), fontsize=6, ha="center", va="bottom")
        axis.axvline(100 / 16, color="gray", linestyle=":", label="chance")
        axis.set_title(f"recall {title} (%)")
        axis.set_xlim(-5, 105)
    axes[0].set_yticks(range(len(groups)), list(groups))
    axes[0].legend(loc="lower right", fontsize=7)
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
