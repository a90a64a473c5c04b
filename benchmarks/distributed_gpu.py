"""GPU checks of distributed training, for a machine with CUDA (none was available when this
was written): peak memory of real training steps against ``memory_estimate.training``, then the
``gpu``-marked tests (single-GPU FSDP2; DDP / FSDP2 over NCCL when there are 2 GPUs). First it
prints the rows of docs/training.md's memory table with the probes run on the GPU (the
activation columns could not be measured on the 24 GB CPU machine past 170m).

    python benchmarks/distributed_gpu.py                      # memory table + gpu tests
    python benchmarks/distributed_gpu.py --presets 170m --steps 2 --no-tests

For each preset: 2 training steps of MAG (stream mode, bf16 autocast, fp32 weights, AdamW)
on one GPU with ``batch`` rows of ``seq_len`` tokens, with and without memory
checkpointing; the peak of ``torch.cuda.max_memory_allocated`` over the second step beside
the estimate (whose activations are fp32: the measured bf16 run should come in under it).
Writes ``results/distributed_gpu.json`` (or ``$OUT`` when set).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from titans_atlas.memory_estimate.training import estimate_memory, table_row
from titans_atlas.models.backbone import model_config
from titans_atlas.train import RunConfig, Trainer
from titans_atlas.train.config import set_value

ROOT = Path(__file__).resolve().parents[1]


def measure(preset: str, seq_len: int, rows: int, memory_checkpoint: bool, steps: int) -> dict:
    overrides = {
        "model.name": "mag", "model.preset": preset, "data.mode": "stream",
        "train.batch_size": rows, "train.seq_len": seq_len, "train.device": "cuda",
        "train.precision": "bf16", "train.memory_checkpoint": memory_checkpoint,
        "train.steps": 10**6, "train.progress": False, "train.out_dir": tempfile.mkdtemp(),
    }  # fmt: skip
    config = RunConfig()  # no preset: the model is exactly model_config("mag", preset)
    for key, value in overrides.items():
        config = set_value(config, key, value)
    trainer = Trainer(config)
    trainer.train_step()  # optimizer state and allocator warm
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps - 1):
        trainer.train_step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / max(steps - 1, 1)
    estimate = estimate_memory(
        model_config("mag", preset), batch_size=rows, seq_len=seq_len,
        memory_checkpoint=memory_checkpoint, probe_tokens=model_config("mag", preset).window,
        device="cuda",
    )  # fmt: skip
    del trainer
    torch.cuda.empty_cache()
    return {
        "preset": preset, "seq_len": seq_len, "rows": rows,
        "memory_checkpoint": memory_checkpoint,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "estimate_gib": estimate.total / 2**30,
        "estimate_activations_gib": estimate.activations / 2**30,
        "tokens_per_s": rows * seq_len / seconds,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["170m", "340m", "760m"])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-tests", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    print(
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}, torch {torch.__version__}"
    )
    print("docs/training.md's table, probes on the GPU (fp32 activations):")
    for preset in args.presets:
        print(table_row("mag", preset, args.seq_len, 8, 512, activations=True, device="cuda"))
    torch.cuda.empty_cache()
    results = []
    print("| preset | memory_checkpoint | peak GiB (bf16) | estimate GiB (fp32 act.) | tok/s |")
    print("|---|---|---|---|---|")
    for preset in args.presets:
        for recompute in (True, False):
            try:
                row = measure(preset, args.seq_len, args.rows, recompute, args.steps)
            except torch.OutOfMemoryError:
                row = {"preset": preset, "memory_checkpoint": recompute, "peak_gib": "OOM"}
                torch.cuda.empty_cache()
            results.append(row)
            print(f"| {preset} | {recompute} | {row['peak_gib']:.2f} | "
                  f"{row['estimate_gib']:.2f} | {row['tokens_per_s']:.0f} |"
                  if row["peak_gib"] != "OOM" else f"| {preset} | {recompute} | OOM | | |",
                  flush=True)  # fmt: skip
    out = Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "distributed_gpu.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.no_tests:
        return 0
    tests = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/train/test_distributed.py"]
    return subprocess.run(tests, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
