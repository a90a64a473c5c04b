"""The first training step's gradient at initialisation (research/LOG.md, section 10).

Build the recall preset's model for each architecture named on the command line, take
one batch of random token rows (8 x 128, the preset's vocabulary), one cross-entropy
backward, and print the gradient norm over all parameters and the three largest parts. With
the shifted start every stream's first key is exactly zero, so this is where the L2
normalisation's slope at zero shows. Public API only; a few seconds per model.

    python research/experiments/first_gradient_probe.py lmm atlas
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from titans_atlas.models import build_model
from titans_atlas.train import build_config


def first_gradient(name: str, seed: int = 0) -> tuple[float, list[tuple[float, str]]]:
    """(total gradient norm, the three largest (norm, parameter) parts) for ``name``."""
    config = build_config("recall", overrides=[f"model.name={name}"]).model.build()
    torch.manual_seed(seed)
    model = build_model(config).train()
    ids = torch.randint(0, config.vocab_size, (8, 128), generator=torch.Generator().manual_seed(1))
    logits, _ = model(ids)
    F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    parts = sorted(((p.grad.norm().item(), n) for n, p in model.named_parameters()), reverse=True)
    return sum(v * v for v, _ in parts) ** 0.5, parts[:3]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for name in args.models:
        total, parts = first_gradient(name, args.seed)
        print(f"{name}: gradient norm {total:.3g}; " + ", ".join(f"{n} {v:.3g}" for v, n in parts))


if __name__ == "__main__":
    main()
