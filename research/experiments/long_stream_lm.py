"""Language modelling past the training length (issue 10 items 1b and 3; research/LOG.md).

Trains one model with the library's loop on tiny shakespeare (the ``quickstart`` preset's size:
dim 128, 2 blocks, 64-token attention window, 128-token training windows; byte-level), then
streams the last ``--eval-tokens`` bytes of the file -- inside the held-out 5% -- with the
state carried, and again with the state reset every 128 tokens (the training length). Loss
per 1k-token block of both, so a memory that degrades past its training length shows as a
carried curve that climbs above the reset one. One JSON line per run; ``--plot`` draws them.

    python research/experiments/long_stream_lm.py --model lmm --seed 0   # decay toward init
    python research/experiments/long_stream_lm.py --model lmm --seed 0 --set model.decay_target=zero
    python research/experiments/long_stream_lm.py --plot

Needs ../shared/data/tinyshakespeare/input.txt (research/LOG.md says where it comes from).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import (  # experiments/ is on sys.path when run
    QUIET,
    experiment_parser,
    read_records,
    run_or_plot,
)

from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import Trainer, build_config

DATA = Path(__file__).resolve().parents[2].parent / "shared/data/tinyshakespeare/input.txt"
RESULTS = Path("docs/results/long_stream.jsonl")
BLOCK, TRAIN_LENGTH, PIECE = 1024, 128, 512


@torch.no_grad()
def block_losses(model, ids: torch.Tensor, reset_every: int | None) -> list[float]:
    """Mean loss (nats/byte) per BLOCK of ``ids [T]``: streamed in pieces with the state
    carried, or in independent windows of ``reset_every`` tokens (state reset each time)."""
    if reset_every is None:
        losses, state = [], None
        for start in range(0, len(ids) - 1, PIECE):
            piece = ids[start : start + PIECE + 1]
            logits, state = model(piece[None, :-1], state)
            losses.append(F.cross_entropy(logits[0], piece[1:], reduction="none"))
        per_token = torch.cat(losses)
    else:
        usable = (len(ids) - 1) // reset_every * reset_every
        windows = ids[: usable + 1].unfold(0, reset_every + 1, reset_every)  # [N, W + 1]
        logits, _ = model(windows[:, :-1])
        per_token = F.cross_entropy(
            logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="none"
        )
    blocks = per_token[: len(per_token) // BLOCK * BLOCK].view(-1, BLOCK)
    return [round(float(b.mean()), 4) for b in blocks]


def run(args: argparse.Namespace) -> dict:
    if not DATA.is_file():
        raise SystemExit(f"missing {DATA}: this experiment reads the shared data folder")
    overrides = [
        f"model.name={args.model}",
        f"data.source={DATA}",
        f"train.seed={args.seed}",
        f"train.steps={args.steps}",
        f"train.out_dir=runs/long_stream/{args.model}-seed{args.seed}",
        *QUIET,
        *args.set,
    ]
    start = time.time()
    trainer = Trainer(build_config("quickstart", overrides=overrides))
    result = trainer.run()
    model = trainer.model.eval()
    text = DATA.read_bytes()[-args.eval_tokens - 1 :]
    ids = torch.tensor(ByteTokenizer().encode(text.decode("utf-8", "replace")))[
        : args.eval_tokens + 1
    ]
    carried = block_losses(model, ids, None)
    reset = block_losses(model, ids, TRAIN_LENGTH)
    return {
        "model": args.model,
        "seed": args.seed,
        "overrides": args.set,
        "decay_target": trainer.config.model.overrides.get("decay_target", "zero"),
        "parameters": model.num_parameters(),
        "steps": result.step,
        "val_bpb": round(result.eval.get("val_bpb", math.nan), 4),
        "carried": carried,
        "reset": reset,
        "carried_bpb": round(sum(carried) / len(carried) / math.log(2), 4),
        "reset_bpb": round(sum(reset) / len(reset) / math.log(2), 4),
        "seconds": round(time.time() - start),
    }


def label(item: dict) -> str:
    extra = [s.split(".")[-1] for s in item["overrides"] if "decay_target" not in s]
    if item["model"] not in ("swa", "transformer"):  # the controls have no memory to decay
        extra.insert(0, f"decay to {item['decay_target']}")
    return f"{item['model']}{' (' + ', '.join(extra) + ')' if extra else ''}"


def plot(path: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_records(path)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, item in enumerate(runs):
        color = f"C{index}"
        xs = [(i + 0.5) * BLOCK / 1000 for i in range(len(item["carried"]))]
        ax.plot(xs, [v / math.log(2) for v in item["carried"]], color=color, marker="o",
                markersize=3, label=f"{label(item)} carried")  # fmt: skip
        ax.plot(xs, [v / math.log(2) for v in item["reset"]], color=color, linestyle=":",
                label=f"{label(item)} reset every {TRAIN_LENGTH}")  # fmt: skip
    title = "tiny shakespeare, held-out tail, streamed past the 128-token training length"
    ax.set(
        xlabel="position in the stream (k bytes)", ylabel="bits per byte (1k blocks)", title=title
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print("| model | params | val bpb | streamed bpb (carried) | reset every 128 | minutes |")
    print("|---|---|---|---|---|---|")
    for item in runs:
        cells = [label(item), f"{item['parameters'] / 1e3:.0f}k", f"{item['val_bpb']:.3f}",
                 f"{item['carried_bpb']:.3f}", f"{item['reset_bpb']:.3f}",
                 f"{item['seconds'] / 60:.1f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = experiment_parser(__doc__, RESULTS, 500)
    parser.add_argument("--eval-tokens", type=int, default=16384)
    run_or_plot(parser.parse_args(), run, plot)


if __name__ == "__main__":
    main()
