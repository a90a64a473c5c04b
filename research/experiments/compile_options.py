"""Does an inductor option speed up the compiled MAC training step? (research/LOG.md, 14)

Builds the benchmark model of docs/benchmarks.md (MAC, dim 256, depth 2, 4 heads, segment
128, chunk 64, bytes, fp32, one 1,024-token row) three times -- eager, compiled with
inductor's defaults, compiled with the options given -- and times their training steps
alternating in one process (each timed on its second call in a row), so a shared machine's
load hits all three alike. Prints each compile's first-call time and the median ratios.

    python research/experiments/compile_options.py --threads 1 --option cpp_wrapper=true

Public API only: ``create_model`` and ``LanguageModel.compile_blocks(options=...)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import titans_atlas as ta


def training_step(options: dict | None):
    """One zero-argument training step and the model it trains; ``options`` None = eager,
    {} = inductor's defaults."""
    torch.manual_seed(0)
    size = {"vocab_size": 256, "dim": 256, "depth": 2, "num_heads": 4}
    model = ta.create_model("mac", **size, window=128, chunk_size=64)
    model = model.train().set_runtime(validate=False)
    if options is not None:
        model.compile_blocks(options=options)
    ids = torch.randint(0, 256, (1, 1025), generator=torch.Generator().manual_seed(1))

    def step() -> None:
        logits, _ = model(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        model.zero_grad(set_to_none=True)

    return step, model


def parse_option(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    if not key or not value:
        raise SystemExit(f"--option: expected KEY=VALUE (a JSON value), got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError as err:
        raise SystemExit(f"--option {key}: {value!r} is not a JSON value ({err})") from None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--option", action="append", default=[], help="inductor KEY=VALUE")
    args = p.parse_args()
    for name in ("threads", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    options = dict(parse_option(o) for o in args.option)
    steps = {}
    for label, opts in [("eager", None), ("default", {}), ("options", options)]:
        start = time.perf_counter()
        steps[label], _ = training_step(opts)
        steps[label]()
        print(f"{label}: first call {time.perf_counter() - start:.1f} s", flush=True)
    rounds = []
    for _ in range(args.rounds):
        row = {}
        for label, step in steps.items():
            step()
            start = time.perf_counter()
            step()
            row[label] = time.perf_counter() - start
        rounds.append(row)
        print({k: round(v, 3) for k, v in row.items()}, flush=True)
    for fast, slow in [("default", "eager"), ("options", "default")]:
        ratio = statistics.median(r[slow] / r[fast] for r in rounds)
        print(f"{fast} over {slow}: {ratio:.3f}x (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
