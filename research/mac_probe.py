"""Which read carries MAC's answer: recall of a trained MAC with each of its two memory reads
silenced (docs/results.md, "MAC reads its memory").

    python research/mac_probe.py RUN_DIR [RUN_DIR ...]

MAC reads its memory twice per block: the retrieved tokens h (eq. 21), attended beside the
segment, and the per-token read m (eq. 25), which gates the attention output (or, with
``mac_gate="attention"``, is what the attention output gates). Each is silenced with a forward
hook (torch's public ``register_forward_hook``) on the module that produces it: m by returning
zeros from the block's ``memory`` (the papers' gate then passes half of y, the swapped gate
nothing), h by returning zeros from ``context_norm`` (models trained with
``mac_context_norm=True``; zero keys and values, so the retrieved tokens carry nothing).
Recall is measured 8 windows back at the training length, 200 queries.
"""

from __future__ import annotations

import argparse
import json

import torch

import titans_atlas as ta
from titans_atlas.eval.distance import recall_accuracy
from titans_atlas.train import resolve_model_dir


def silence(module: torch.nn.Module) -> torch.utils.hooks.RemovableHandle:
    def hook(_module, _inputs, output):
        if isinstance(output, tuple):  # NeuralMemory: (y, state) -- keep the state
            return (torch.zeros_like(output[0]), *output[1:])
        return torch.zeros_like(output)

    return module.register_forward_hook(hook)


def probe(run_dir: str, samples: int = 200) -> dict:
    model = ta.load_model(resolve_model_dir(run_dir)).eval()
    window, blocks = model.config.window, [b for b in model.modules() if hasattr(b, "gate")]
    measure = lambda: recall_accuracy(  # noqa: E731
        model, 128, 8 * window, vocab_size=32, num_pairs=4, samples=samples, seed=11
    )
    row = {"run": run_dir, "both reads": measure()}
    for label, name in (("h silenced", "context_norm"), ("m silenced", "memory")):
        handles = [silence(getattr(b, name)) for b in blocks if hasattr(b, name)]
        row[label] = measure() if handles else None
        for handle in handles:
            handle.remove()
    handles = [silence(getattr(b, n)) for b in blocks for n in ("context_norm", "memory")
               if hasattr(b, n)]  # fmt: skip
    row["both silenced"] = measure()
    for handle in handles:
        handle.remove()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run or model directories of trained MACs")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for run in args.runs:
        print(json.dumps(probe(run, args.samples)))


if __name__ == "__main__":
    main()
