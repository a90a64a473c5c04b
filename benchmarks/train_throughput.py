"""Training throughput and peak memory per registered model at one small shape: tokens/s of
a full training step (forward, backward, clip, AdamW) through ``titans_atlas.train.Trainer``,
with and without stream mode (state carried between windows) and memory activation
checkpointing.

    python benchmarks/train_throughput.py                  # the quickstart shape, all models
    python benchmarks/train_throughput.py --models lmm mag --threads 2
    python benchmarks/train_throughput.py --quick          # smoke run: tiny shape

Peak memory is the RSS growth of one step in a fresh process (see ``_harness.py``). Take
numbers on a quiet machine: ``other_cpu_s`` says how much else ran meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import titans_atlas as ta
from _harness import peak_memory, set_threads, time_callable
from titans_atlas.train import Trainer, build_config

RESULTS = Path(__file__).parent / "results"
SHAPES = {  # "default" is the quickstart preset's shape
    "default": {"dim": 128, "depth": 2, "num_heads": 4, "window": 64, "chunk": 32,
                "batch": 8, "seq": 128},
    "quick": {"dim": 32, "depth": 1, "num_heads": 2, "window": 16, "chunk": 16,
              "batch": 2, "seq": 32},
}  # fmt: skip


def make_step(model: str, shape: dict, stream: bool, checkpoint: bool, out_dir: str):
    """A zero-argument callable running one training step (module level: picklable)."""
    overrides = {
        "model.name": model, "model.dim": shape["dim"], "model.depth": shape["depth"],
        "model.num_heads": shape["num_heads"], "model.window": shape["window"],
        "model.chunk_size": shape["chunk"], "train.batch_size": shape["batch"],
        "train.seq_len": shape["seq"], "train.memory_checkpoint": checkpoint,
        "data.mode": "stream" if stream else "packed", "train.out_dir": out_dir,
        "train.progress": False, "train.steps": 10**9,
    }  # fmt: skip
    trainer = Trainer(build_config("quickstart", overrides=overrides))
    return trainer.train_step


def measure(model: str, shape: dict, stream: bool, checkpoint: bool, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        step = make_step(model, shape, stream, checkpoint, tmp)
        timing = time_callable(step, warmup=2, repeats=5)
        memory = peak_memory(make_step, model, shape, stream, checkpoint, tmp, threads=threads)
    tokens = shape["batch"] * shape["seq"]
    return {
        "model": model, "stream": stream, "memory_checkpoint": checkpoint,
        "tokens_per_s": tokens / timing.median_s, "step_ms": 1000 * timing.median_s,
        "peak_mib": memory["peak_bytes"] / 2**20, "other_cpu_s": timing.other_cpu_s,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=ta.list_models())
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny shape, for a smoke run")
    args = parser.parse_args()
    set_threads(args.threads)
    shape = SHAPES["quick" if args.quick else "default"]
    rows = []
    print("| model | stream | ckpt | tokens/s | ms/step | peak MiB | other CPU s |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        has_memory = model not in ("swa", "transformer")
        for stream in (False, True):
            if stream and model == "transformer":
                continue  # stream mode refuses a KV cache that grows without bound
            for checkpoint in (False, True) if has_memory else (False,):
                row = measure(model, shape, stream, checkpoint, args.threads)
                rows.append(row)
                print(
                    f"| {model} | {stream} | {checkpoint} | {row['tokens_per_s']:.0f} | "
                    f"{row['step_ms']:.1f} | {row['peak_mib']:.1f} | {row['other_cpu_s']:.2f} |",
                    flush=True,
                )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"train_throughput{'_quick' if args.quick else ''}.json"
    out.write_text(json.dumps({"shape": shape, "threads": args.threads, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
