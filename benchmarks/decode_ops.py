"""What an eager decode step dispatches: the aten operations of one single-token step of the
benchmark MAC, counted with a ``TorchDispatchMode`` (each op once, as the dispatcher runs it
after autograd and composite ops are taken apart -- the profiler's op count also counts the
nested calls) and attributed to the library's source line that issued it. Eager decoding is
bound by the number of these operations, not by arithmetic (docs/benchmarks.md).

    python benchmarks/decode_ops.py                    # dim 256, depth 2, window 128, chunk 64
    python benchmarks/decode_ops.py --model lmm --top 20
"""

from __future__ import annotations

import argparse
import collections
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import titans_atlas as ta
from titans_atlas.ops import validating


class OpCounter(TorchDispatchMode):
    """Counts every dispatched aten op by name and by the last titans_atlas frame above it."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: collections.Counter[str] = collections.Counter()
        self.by_line: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_op[str(func.overloadpacket)] += 1
        ours = [f for f in traceback.extract_stack()[:-1] if "titans_atlas" in f.filename]
        where = "(outside titans_atlas)"
        if ours:
            where = f"{ours[-1].filename.split('titans_atlas/')[-1]}:{ours[-1].lineno}"
        self.by_line[where] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mac")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8, help="decode steps counted")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = ta.create_model(
        args.model, vocab_size=256, dim=args.dim, depth=args.depth, num_heads=4,
        window=args.window, chunk_size=args.chunk_size,
    ).eval()  # fmt: skip
    token = torch.ones(1, 1, dtype=torch.long)
    counter = OpCounter()
    with torch.no_grad(), validating(False):  # as generate decodes after its checked prefill
        _, state = model(torch.randint(0, 256, (1, 256)), last_only=True)
        for _ in range(3):
            _, state = model(token, state=state, last_only=True)
        with counter:
            for _ in range(args.steps):
                _, state = model(token, state=state, last_only=True)
    total = sum(counter.by_op.values()) / args.steps
    print(f"{args.model}: {total:.0f} aten ops dispatched per decoded token")
    for title, counts in (("by op", counter.by_op), ("by source line", counter.by_line)):
        print(f"-- {title}")
        for key, count in counts.most_common(args.top):
            print(f"{count / args.steps:8.1f}  {key}")


if __name__ == "__main__":
    main()
