"""When does compiling a training run pay? For each run preset: the compile time, the eager and
compiled step times (alternating in one process, so the machine's load hits both alike), the
break-even in steps, and what ``train.compile="auto"`` chooses for the preset as shipped --
the measurement behind ``TRAIN_PAYS_AFTER_STEPS``
(``titans_atlas.compiling``; docs/benchmarks.md, "What you get by default").

    python benchmarks/compile_break_even.py --presets recall quickstart --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from titans_atlas import compiling
from titans_atlas.train import Trainer, build_config


def trainer(preset: str, compile: bool, out: str, threads: int) -> Trainer:
    settings = {"train.compile": compile, "train.out_dir": out, "train.progress": False,
                "train.threads": threads, "train.eval_every": 0, "train.checkpoint_every": 0,
                "train.control": None}  # fmt: skip
    return Trainer(build_config(preset, overrides=settings), force=True)


def timed(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def measure(preset: str, rounds: int, threads: int) -> dict:
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as scratch:
        eager = trainer(preset, False, f"{scratch}/eager", threads)
        compiled = trainer(preset, True, f"{scratch}/compiled", threads)
        eager.train_step()  # warm-up
        first = timed(compiled.train_step)  # compiles the forward and the backward
        pairs = [(timed(eager.train_step), timed(compiled.train_step)) for _ in range(rounds)]
    eager_s = statistics.median(e for e, _ in pairs)
    compiled_s = statistics.median(c for _, c in pairs)
    compile_s = first - compiled_s
    saving = eager_s - compiled_s
    steps = compile_s / saving if saving > 0 else float("inf")
    total_steps = build_config(preset).train.steps
    return {
        "preset": preset, "eager_s": eager_s, "compiled_s": compiled_s,
        "speedup": eager_s / compiled_s, "compile_s": compile_s, "break_even_steps": steps,
        "compile_in_steps": compile_s / eager_s, "steps": total_steps,
        "auto": "compile" if total_steps >= compiling.TRAIN_PAYS_AFTER_STEPS else "eager",
        "compile_pays": total_steps > steps,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["recall", "quickstart"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| preset | steps | eager s/step | compiled s/step | speed-up | compile s | "
          "compile = eager steps | break-even steps | auto picks | compiling pays |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for preset in args.presets:
        r = measure(preset, args.rounds, args.threads)
        print(f"| {preset} | {r['steps']} | {r['eager_s']:.3f} | {r['compiled_s']:.3f} | "
              f"{r['speedup']:.2f}x | {r['compile_s']:.0f} | {r['compile_in_steps']:.0f} | "
              f"{r['break_even_steps']:.0f} | {r['auto']} | "
              f"{'yes' if r['compile_pays'] else 'no'} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
