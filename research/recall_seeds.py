"""Recall-task seed sweep: train each model at each seed with the ``recall`` preset and record
recall at 8 attention windows and at 16x the training length (docs/results.md, "Binding in
every seed"). Public API only; resumable (rows already in ``--out`` are skipped).

    python research/recall_seeds.py --models lmm --seeds 0-9
    python research/recall_seeds.py --models mag,swa --seeds 0-9 --set model.qk_init=independent

One row per (model, seed) in a JSON-lines file: the settings, the final training loss,
recall by distance ``d{distance}`` and by length ``x{n}``, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from titans_atlas.eval.distance import recall_by_distance
from titans_atlas.train import Trainer, build_config

WINDOWS = 8  # the target distance, in attention windows
LENGTH = 16  # the target length, in training lengths


def seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def run_one(
    model: str, seed: int, steps: int, overrides: list[str], samples: int, keep: str | None
) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out = scratch if keep is None else f"{keep}/{model}-s{seed}"
        settings = {"model.name": model, "train.seed": seed, "train.steps": steps,
                    "train.out_dir": out, "train.progress": "false", "train.threads": 1,
                    "train.eval_every": 0, "train.checkpoint_every": 0}  # fmt: skip
        config = build_config(
            "recall", overrides=[f"{k}={v}" for k, v in settings.items()] + list(overrides)
        )
        start = time.time()
        # `Trainer` is looked up here, so an experiment may swap in a subclass that starts the
        # model differently (research/experiments/start_pilot.py)
        trainer = Trainer(config, force=True)  # a kept directory is this sweep's own
        result = trainer.run()
        if result.stopped_by is not None:  # a signal cut the run short: record nothing
            raise SystemExit(f"{model} seed {seed} stopped by {result.stopped_by}")
        length, window = config.train.seq_len, trainer.model.config.window
        args = config.data.task_args
        recall = recall_by_distance(
            trainer.model, [min(length - 2, WINDOWS * window)], [LENGTH * length],
            train_length=length, vocab_size=args.get("vocab_size", 32),
            num_pairs=args.get("num_pairs", 4), samples=samples, seed=1000 + seed,
        )  # fmt: skip
    return {
        "model": model, "seed": seed, "steps": steps, "overrides": list(overrides),
        "loss": round(list(result.losses.values())[-1], 4) if result.losses else None,
        **{f"d{d}": a for d, a in recall["distance"].items()},
        **{f"x{n // length}": a for n, a in recall["length"].items()},
        "seconds": round(time.time() - start, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="lmm", help="comma-separated model names")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,4,7")
    parser.add_argument("--steps", type=int, default=300, help="the recall preset's budget")
    parser.add_argument("--samples", type=int, default=100, help="recall samples per point")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tag", default="", help="a label stored in every row")
    parser.add_argument("--out", default="research/results/recall_seeds.jsonl")
    parser.add_argument("--keep", help="keep each run directory under this folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done.add((row["tag"], row["model"], row["seed"], row["steps"], *row["overrides"]))
    for model in args.models.split(","):
        for seed in seeds(args.seeds):
            if (args.tag, model, seed, args.steps, *args.set) in done:
                continue
            row = {
                "tag": args.tag,
                **run_one(model, seed, args.steps, args.set, args.samples, args.keep),
            }
            print(json.dumps(row), flush=True)
            with out.open("a") as file:
                file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
