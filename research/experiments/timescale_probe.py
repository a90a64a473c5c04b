"""Where each memory head's gates sit after training, per layer and head: the median inner
step theta and forget gate alpha over the first 4,096 bytes of The Jungle Book, and the
horizon 1 / alpha in bytes. With ``timescale_ratio`` the slow heads are the ones whose
ranges were scaled down; this shows whether training used them (docs/results.md, section 4).

    python research/experiments/timescale_probe.py runs/ts1024-seed0 runs/ts1024-seed2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import load_finished  # experiments/ is on sys.path when run
from books_lm import EVAL_TEXTS

from titans_atlas.layers import MemoryWrite, NeuralMemory, register_memory_hook

BYTES = 4096


@torch.no_grad()
def head_gates(model, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per memory layer, the median theta and alpha per head ``([H], [H])`` over ``ids``."""
    seen: list[list] = []
    for layer in (m for m in model.modules() if isinstance(m, NeuralMemory)):
        calls: list = []
        seen.append(calls)

        def hook(event, calls=calls):
            if isinstance(event, MemoryWrite):
                calls.append((event.lr.detach(), event.decay.detach()))  # [B, T, H] each

        register_memory_hook(layer, hook)
    model(ids)
    out = []
    for calls in seen:
        lr = torch.cat([c[0] for c in calls], dim=1).flatten(0, 1)  # [B*T, H]
        decay = torch.cat([c[1] for c in calls], dim=1).flatten(0, 1)
        out.append((lr.median(dim=0).values, decay.median(dim=0).values))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of books_lm.py")
    parser.add_argument("--steps", type=int, default=600, help="the runs' finished step")
    args = parser.parse_args()
    text = EVAL_TEXTS["jungle_book"][0].read_bytes()[:BYTES]
    ids = torch.tensor([list(text)])  # [1, T]: bytes are the tokens
    for run in args.runs:
        model = load_finished(run, args.steps).eval()
        print(run)
        for i, (lr, decay) in enumerate(head_gates(model, ids)):
            heads = "  ".join(
                f"h{h}: theta {t:.2g} alpha {a:.2g} ({1 / a:.0f} B)"
                for h, (t, a) in enumerate(zip(lr.tolist(), decay.tolist()))
            )
            print(f"  layer {i}: {heads}")


if __name__ == "__main__":
    main()
