"""The carried memory on unseen books, every seed (docs/results.md, section 4): loss by
position from a fresh state, and the gain past byte 2,048 (reset every 512 bytes minus
carried), for the stream-trained `lmm` with per-head timescales beside the SWA control.
Reads ``research/experiments/books_lm.py``'s rows; trains nothing.

    python research/plot_books_carry.py   # -> docs/results/books_carry.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BINS = (64, 128, 256, 512, 1024, 2048, 4096)  # books_lm.py's by-position bin upper edges
TEXTS = (("jungle_book", "The Jungle Book"), ("wikitext2_test", "WikiText-2 test, 256k bytes"))
STREAM = ("data.mode=stream", "data.stream_tokens=16384")
MEMORY = ("model.memory.timescale_ratio=4096", "model.memory.timescale_lr_ratio=32")
TARGET = 0.03  # issue 33, item 3: bits per byte


def setting_rows(rows: list[dict], model: str, needed: tuple[str, ...], steps: int) -> list[dict]:
    """The rows of one setting: the model, every override in ``needed``, no other model
    override (``train.*`` ones only choose the run directory or shape the stream)."""
    picked = []
    for row in rows:
        model_overrides = {o for o in row["overrides"] if o.startswith("model.")}
        if row["model"] != model or row["steps"] != steps or row.get("evaluated_only"):
            continue
        if set(needed) <= set(row["overrides"]) and model_overrides == {
            o for o in needed if o.startswith("model.")
        }:
            picked.append(row)
    return sorted(picked, key=lambda r: r["seed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="research/results/books_timescales.jsonl")
    parser.add_argument("--out", default="docs/results/books_carry.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line]
    groups = {
        "lmm, timescales 4096 / 32": (setting_rows(rows, "lmm", STREAM + MEMORY, 600), "C0"),
        "swa (control)": (setting_rows(rows, "swa", STREAM, 600), "C1"),
    }
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    for column, (text, title) in enumerate(TEXTS):
        curves, gains = axes[0, column], axes[1, column]
        offset = 0
        for label, (members, color) in groups.items():
            for i, row in enumerate(members):
                scores = row[text]
                curves.plot(BINS, scores["by_position"], color=color, alpha=0.5, lw=1,
                            label=f"{label}, carried" if i == 0 else None)  # fmt: skip
                curves.scatter([BINS[-1] * 1.15], [scores["past_far"]["reset"]], color=color,
                               marker="x", s=20, label=f"{label}, reset every 512 (past 2,048)"
                               if i == 0 else None)  # fmt: skip
            seeds = [row["seed"] for row in members]
            values = [row[text]["past_far"]["gain"] for row in members]
            gains.bar([offset + s for s in range(len(seeds))], values, color=color, label=label)
            for x, seed in enumerate(seeds):
                gains.annotate(str(seed), (offset + x, 0), fontsize=7, ha="center", va="top")
            offset += len(seeds) + 1
        curves.axvline(64, color="grey", linestyle=":", label="attention window (64)")
        curves.set(
            xscale="log", xlabel="position in a 4,096-byte segment (bin upper edge)",
            ylabel="bits per byte", title=f"{title}: loss by position, fresh state",
        )  # fmt: skip
        gains.axhline(TARGET, color="grey", linestyle="--", label=f"target {TARGET}")
        gains.axhline(0, color="black", lw=0.5)
        gains.set(xticks=[], ylabel="reset - carried past byte 2,048 (bits per byte)",
                  title=f"{title}: carry gain by seed")  # fmt: skip
        for axis in (curves, gains):
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    for label, (members, _) in groups.items():
        print(label, "seeds", [row["seed"] for row in members])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
