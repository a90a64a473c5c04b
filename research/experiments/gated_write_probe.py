"""How far one round of writes moves an untrained memory's read (research/LOG.md, section 9).

Write 4 unit-norm key -> value pairs into an untrained residual memory (Dk = 32, 2 heads,
batch 64, per-token Muon, theta 0.1, no momentum or decay), read the keys back, and report the
direction (cosine of the read's change with the value) and the size of the change, for the MLP
and the gated memory with their first-layer weights (w1, or gate and up) scaled. Public API
only; float64; a few seconds.

    python research/experiments/gated_write_probe.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from titans_atlas.ops import GatedMLPMemory, MLPMemory, memory_scan

DIM, HEADS, BATCH, PAIRS = 32, 2, 64, 4


def probe(memory, first_layer_scale: float, lr: float = 0.1) -> tuple[float, float]:
    """(cos(read change, v), mean |read change|) after writing the pairs once."""
    torch.manual_seed(0)
    weights = memory.init_weights(HEADS, dtype=torch.float64)
    first = ("gate", "up", "w1")
    weights = {n: w * first_layer_scale if n in first else w for n, w in weights.items()}
    state = memory.initial_state(weights, BATCH)
    shape = (BATCH, PAIRS, HEADS, DIM)
    keys = F.normalize(torch.randn(*shape, dtype=torch.float64), dim=-1)  # [B, T, H, D]
    values = F.normalize(torch.randn(*shape, dtype=torch.float64), dim=-1)
    gate = lambda x: torch.full(shape[:3], x, dtype=torch.float64)  # noqa: E731
    _, after = memory_scan(
        memory, keys, keys, values, gate(lr), gate(0.0), gate(0.0), state,
        chunk_size=1, update_rule="muon",
    )  # fmt: skip
    x = keys.transpose(1, 2)  # [B, H, T, D]
    change = memory.forward(after.weights, x) - memory.forward(state.weights, x)
    cos = F.cosine_similarity(change, values.transpose(1, 2), dim=-1).mean().item()
    return cos, change.norm(dim=-1).mean().item()


def main() -> None:
    mlp = MLPMemory(DIM, DIM, expansion=4, residual=True)
    gated = GatedMLPMemory(DIM, DIM, expansion=4, residual=True)
    lecun_ratio = DIM**0.25  # gated's default first layer (fan_in^-1/4) over LeCun's
    print("| memory (first layer) | cos(read change, v) | mean read change |")
    print("|---|---|---|")
    rows = [("MLP (default: LeCun)", mlp, 1.0),
            ("gated, LeCun gate and up (the earlier init)", gated, 1 / lecun_ratio),
            ("gated, gate and up x2 LeCun", gated, 2 / lecun_ratio),
            ("gated (default: fan_in^-1/4)", gated, 1.0)]  # fmt: skip
    for name, memory, scale in rows:
        cos, size = probe(memory, scale)
        print(f"| {name} | {cos:.2f} | {size:.3f} |")


if __name__ == "__main__":
    main()
