"""Host syncs per forward and per training step (issues 12 and 16): reads of a tensor's value
into Python (aten ``_local_scalar_dense``: ``.item()``, ``bool(t)``), each of which waits for a
GPU's launch queue to drain. Counted, not timed, so a CPU gives the GPU's number.

* forward: one forward of each model (dim 256, depth 2, 4 heads, window 128, chunk 64, 1,024
  byte tokens), with the value checks on (the default) and off (``set_runtime(validate=False)``).
* step: one ``titans train`` step of the ``debug`` preset, stream mode, after a first step
  (AdamW's own CPU-side reads of its step counter are counted too; on a GPU they do not sync).

    python benchmarks/host_syncs.py                 # results in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import tempfile

import torch

import titans_atlas as ta
from titans_atlas.ops.checks import CountSyncs
from titans_atlas.train import Trainer, build_config


def forward_syncs(name: str, validate: bool) -> int:
    torch.manual_seed(0)
    size = {"vocab_size": 256, "dim": 256, "depth": 2, "num_heads": 4, "window": 128}
    model = ta.create_model(name, chunk_size=64, **size).set_runtime(validate=validate)
    ids = torch.randint(0, 256, (1, 1024))
    with torch.no_grad(), CountSyncs() as syncs:
        model(ids)
    return syncs.count


def step_syncs() -> int:
    with tempfile.TemporaryDirectory() as out:
        overrides = ["data.mode=stream", f"train.out_dir={out}", "train.progress=false"]
        trainer = Trainer(build_config("debug", overrides=overrides))
        trainer.train_step()
        with CountSyncs() as syncs:
            trainer.train_step()
    return syncs.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["mac", "lmm", "mag", "atlas"])
    args = parser.parse_args()
    print("| model | forward, checks on | forward, checks off |")
    print("|---|---|---|")
    for name in args.models:
        print(f"| {name} | {forward_syncs(name, True)} | {forward_syncs(name, False)} |")
    print(f"\none `debug` training step (stream mode): {step_syncs()} syncs")


if __name__ == "__main__":
    main()
