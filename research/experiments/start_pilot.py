"""Pilot for a start that binds recall and trains a good books model (research/LOG.md, 8).

The recall-safe default (`qk_init="shifted"`, 2 taps) binds every recall seed but costs the
memory-only books model ~0.15 bits per byte; the independent start with 4 taps trains the
better books model and binds no recall seed (docs/results.md, section 4). This pilot starts
from the independent start with 4 taps and, before training, adds the shifted address on top:
the query rows of `to_qkv` copied from the key rows, every convolution's bias zeroed, its
random signed taps halved and the delay tap added (key: the previous token; query, value: the
current one). It runs the two experiments unchanged, with `Trainer` replaced by a subclass
that applies the start after the model is built:

    python research/experiments/start_pilot.py recall 0-9     # rows -> --out
    python research/experiments/start_pilot.py books 0        # rows -> --out
    python research/experiments/start_pilot.py recall 0-3 --variant key-delay

Not a library option yet: if it holds up, it becomes a `qk_init` choice with its float64
parity and MLX twin, and the recall tables are rerun under it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from titans_atlas.layers.memory_config import SHIFTED_CONV_LAGS
from titans_atlas.train import Trainer

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # books_lm.py and recall_seeds.py

DELAYS = SHIFTED_CONV_LAGS  # the library's shifted start's lags: key 1, query and value 0
TAP_SCALE = 0.5  # the independent start's random taps, halved, under the delay tap


@torch.no_grad()
def shifted_mix_start(
    model: torch.nn.Module,
    tie_query: bool = True,
    delays: dict[str, int] = DELAYS,
    head_fraction: float = 1.0,
) -> int:
    """Apply the pilot start to every memory layer of ``model``; returns how many.

    ``tie_query`` copies the key rows of `to_qkv` into the query rows; ``delays`` names the
    convolutions (of "q", "k", "v") that get the zeroed bias, halved taps and the delay tap --
    the others keep the independent start. ``head_fraction`` limits both to the first
    ``round(H * head_fraction)`` heads (channels are ``(h d)``, head-major); the other heads
    keep the independent start.
    """
    layers = 0
    for module in model.modules():
        convs = getattr(module, "conv", None)
        if not (hasattr(module, "to_qkv") and isinstance(convs, torch.nn.ModuleDict)):
            continue
        weight = module.to_qkv.weight  # rows [q | k | v]
        width = weight.shape[0] // 3
        heads = module.num_heads
        rows = width // heads * round(heads * head_fraction)  # the started heads' channels
        if tie_query:
            weight[:rows] = weight[width : width + rows]
        for name, lag in delays.items():
            conv = convs[name].conv  # depthwise, weight [D, 1, K]; tap K-1 is the current token
            taps = conv.weight.shape[-1]
            conv.bias[:rows] = 0.0
            conv.weight[:rows].mul_(TAP_SCALE)
            conv.weight[:rows, 0, taps - 1 - min(lag, taps - 1)] += 1.0
        layers += 1
    return layers


# The variants: "shifted-mix" is the start above; "key-delay" puts the delay on the key path
# only and leaves the query independent (the address then has to be learned); "half-heads"
# gives the shifted-mix start to half the heads and leaves the others independent (recall
# needs one head that binds; the others stay free for local mixing).
VARIANTS = {
    "shifted-mix": {"tie_query": True, "delays": DELAYS},
    "key-delay": {"tie_query": False, "delays": {"k": 1}},
    "half-heads": {"tie_query": True, "delays": DELAYS, "head_fraction": 0.5},
}


class PilotTrainer(Trainer):
    """`Trainer` whose model gets the pilot start before the first step."""

    variant = "shifted-mix"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if shifted_mix_start(self.model, **VARIANTS[self.variant]) == 0:
            raise SystemExit("start_pilot: the model has no memory layer to start")


START = ["model.conv_kernel=4", "model.qk_init=independent"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["recall", "books"])
    parser.add_argument("seeds", help="recall: e.g. 0-9; books: one seed")
    parser.add_argument("--out", default="research/results/start_pilot.jsonl")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="shifted-mix")
    args = parser.parse_args()
    PilotTrainer.variant = args.variant
    tag = f"pilot-{args.variant}"
    if args.experiment == "recall":
        import recall_seeds

        recall_seeds.Trainer = PilotTrainer
        sets = [x for s in START for x in ("--set", s)]
        recall_seeds.main(["--models", "lmm", "--seeds", args.seeds,
                           "--tag", tag, "--out", args.out, *sets])  # fmt: skip
    else:
        import books_lm

        books_lm.Trainer = PilotTrainer
        sets = [x for s in START for x in ("--set", s.replace("model.", "model.memory."))]
        out_dir = f"train.out_dir=runs/start_pilot/{args.variant}-lmm-seed{args.seeds}"
        books_lm.main(["--model", "lmm", "--seed", args.seeds,
                       "--results", args.out, "--set", out_dir, *sets])  # fmt: skip


if __name__ == "__main__":
    main()
