"""What an untrained memory reads back after one write per key (research/LOG.md, sections 16-17).

Write 4 unit-norm key -> value pairs, once each, into an untrained memory (Dk = Dv = 64, one
head, batch 64, the momentum rule with theta 0.1 and no momentum or decay, one token per
step) and read the keys back. Reported per memory: the read's norm before any write (what
the untrained memory answers), how far the writes moved the read, and the cosine of the read
after the writes with the value written (what a query gets). The linear memory starts at zero;
the MLP memories with their last weight drawn by LeCun's rule, at half its scale (the layer's
default) or at zero (``output_init`` 1, 0.5, 0).
Public API only; float64; a few seconds.

    python research/experiments/output_init_probe.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from titans_atlas.ops import LinearMemory, MLPMemory, memory_scan

DIM, HEADS, BATCH, PAIRS = 64, 1, 64, 4


def probe(memory, lr: float = 0.1) -> tuple[float, float, float]:
    """(|read| before, |read change|, cos(read after, v)), means over keys and streams."""
    torch.manual_seed(0)
    state = memory.initial_state(memory.init_weights(HEADS, dtype=torch.float64), BATCH)
    shape = (BATCH, PAIRS, HEADS, DIM)  # [B, T, H, D]
    keys = F.normalize(torch.randn(*shape, dtype=torch.float64), dim=-1)
    values = F.normalize(torch.randn(*shape, dtype=torch.float64), dim=-1)
    gate = lambda x: torch.full(shape[:3], x, dtype=torch.float64)  # noqa: E731
    _, after = memory_scan(
        memory, keys, keys, values, gate(lr), gate(0.0), gate(0.0), state, chunk_size=1
    )
    x, v = keys.transpose(1, 2), values.transpose(1, 2)  # [B, H, T, D]
    before, read = memory.forward(state.weights, x), memory.forward(after.weights, x)
    cos = F.cosine_similarity(read, v, dim=-1).mean().item()
    return before.norm(dim=-1).mean().item(), (read - before).norm(dim=-1).mean().item(), cos


def main() -> None:
    zero = {"output_init": "zero"}
    rows = [
        ("linear (starts at zero)", LinearMemory(DIM, DIM)),
        ("MLP x4, last weight LeCun (`output_init=1`)", MLPMemory(DIM, DIM, output_init=1)),
        (
            "MLP x4, last weight half LeCun (`output_init=0.5`)",
            MLPMemory(DIM, DIM, output_init=0.5),
        ),
        ('MLP x4, last weight zero (`output_init="zero"`)', MLPMemory(DIM, DIM, **zero)),
        ("MLP x1, last weight LeCun", MLPMemory(DIM, DIM, expansion=1)),
        ("MLP x1, last weight zero", MLPMemory(DIM, DIM, expansion=1, **zero)),
    ]
    print("| memory | read before writing | read moved by the writes | cos(read after, value) |")
    print("|---|---|---|---|")
    for name, memory in rows:
        before, moved, cos = probe(memory)
        print(f"| {name} | {before:.3f} | {moved:.3f} | {cos:.2f} |")


if __name__ == "__main__":
    main()
