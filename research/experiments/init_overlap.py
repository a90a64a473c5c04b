"""Does an added part change the initialisation of the rest? (research/LOG.md, section 1:
"One seed is not a comparison").

Builds the ``recall`` preset's model as ``titans train`` does (same seed) with and without each
override set and counts the parameter tensors both models have (same name and shape) that
start equal. A part that draws random numbers when it is built -- a feature projection, wider
gate projections -- shifts every draw after it, so "the same seed" then starts the shared
parameters elsewhere, the embedding included, and a one-seed comparison compares two
initialisations as much as two architectures.

    python research/experiments/init_overlap.py > docs/results/init_overlap.txt
"""

from __future__ import annotations

import sys

import torch
from _common import QUIET  # experiments/ is on sys.path when run

from titans_atlas.train import Trainer, build_config

ARMS = (
    ["model.residual=true"],
    ["model.update_rule=muon_chunk"],
    ["model.omega_window=8", "model.omega_gate_source=tap"],
    ["model.feature_map=polynomial", "model.feature_projection=true"],
    ["model.feature_map=polynomial", "model.feature_projection=true", "model.poly_degree=1"],
)


def initial_parameters(overrides: list[str], seed: int) -> dict[str, torch.Tensor]:
    base = ["model.name=lmm", f"train.seed={seed}", "train.control=null"]
    base.append("train.out_dir=runs/init_overlap")
    config = build_config("recall", overrides=base + QUIET + overrides)
    return {name: p.detach().clone() for name, p in Trainer(config).model.named_parameters()}


def main(seed: int = 1) -> None:
    plain = initial_parameters([], seed)
    print(f"recall preset, lmm, seed {seed}: {len(plain)} parameter tensors")
    print("added | shared tensors | start equal | start different (first three)")
    for overrides in ARMS:
        other = initial_parameters(overrides, seed)
        shared = [n for n, p in plain.items() if n in other and other[n].shape == p.shape]
        differ = [n for n in shared if not torch.equal(plain[n], other[n])]
        added = " ".join(o.removeprefix("model.") for o in overrides)
        print(f"{added} | {len(shared)} | {len(shared) - len(differ)} | {len(differ)} {differ[:3]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
