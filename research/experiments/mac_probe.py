"""Why MAC does not learn the recall task (research/LOG.md, section 1): what its memory
writes and what it reads, against the ``lmm``'s.

For trained checkpoints of the recall preset (and, with ``--init NAME``, an untrained model
of the preset's shape), one batch of the distance test (``kv_recall_batch``: 128 tokens, 4
pairs among noise, the asked pair's value 64 tokens before the query at the end). Per memory
layer, linear probes (softmax regression fitted on 2,000 rows, scored on 1,000 others; chance
1/16 for a value, 1/15 for a key) of what the layer hands ``memory_scan`` at the asked pair's
value position:

* ``v -> value``: does the written value identify the value token?
* ``k -> key``: does the written key identify the pair's key (the token before)?

And ``read -> answer``: a probe of what the layer reads at the final query (its output at
that position; for MAC also the retrieval h = M_{s-1}(q(x)) that enters the attention). A
memory that binds pairs reads the answer far above chance; one that never receives the
pairs shows the written value or key at chance too.

    python research/experiments/recall_by_distance.py --model mac --seed 0
    python research/experiments/mac_probe.py runs/recall/mac-seed0-*/checkpoints/step_00001500 \
        runs/recall/lmm-seed3-*/checkpoints/step_00001500 --init mac
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from recall_by_distance import PAIRS, VOCAB  # experiments/ is on sys.path when run

from titans_atlas import create_model
from titans_atlas.eval.loading import load_checkpoint
from titans_atlas.eval.recall import kv_recall_batch
from titans_atlas.layers import MemoryRead, MemoryWrite, NeuralMemory, register_memory_hook
from titans_atlas.train import build_config

LENGTH, DISTANCE, ROWS, FIT = 128, 64, 3000, 2000


def capture(model, inputs: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Per memory layer: k ``[B, T, H, D]`` and v ``[B, T, H*D]`` as handed to
    ``memory_scan`` (all of a layer's calls joined in time), its output at the last
    position ``read`` and, for MAC, the retrieval there ``h`` ``[B, D]`` -- observed with
    ``register_memory_hook`` and a forward hook."""
    layers = [m for m in model.modules() if isinstance(m, NeuralMemory)]
    seen = {id(m): {"k": [], "v": []} for m in layers}

    def record(event):
        if isinstance(event, MemoryWrite):
            seen[id(event.layer)]["k"].append(event.k)
            seen[id(event.layer)]["v"].append(event.v.flatten(2))
        elif isinstance(event, MemoryRead):  # MAC's read-only retrieval; others have none
            seen[id(event.layer)]["h"] = event.output[:, -1]

    def leave(module, args, output):
        seen[id(module)]["read"] = output[0][:, -1]

    hooks = [register_memory_hook(m, record) for m in layers]
    hooks += [m.register_forward_hook(leave) for m in layers]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return [{**seen[id(m)], **{name: torch.cat(seen[id(m)][name], 1) for name in "kv"}}
            for m in layers]  # fmt: skip


def probe(features: torch.Tensor, target: torch.Tensor, classes: int) -> float:
    """Held-out accuracy of a softmax regression from ``features [N, F]`` to ``target [N]``."""
    x = features.float()
    x = (x - x[:FIT].mean(0)) / (x[:FIT].std(0) + 1e-6)
    weight = torch.zeros(x.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    optimiser = torch.optim.Adam([weight, bias], lr=0.05)
    for _ in range(300):
        optimiser.zero_grad()
        loss = F.cross_entropy(x[:FIT] @ weight + bias, target[:FIT]) + 1e-3 * weight.square().sum()
        loss.backward()
        optimiser.step()
    return ((x[FIT:] @ weight + bias).argmax(-1) == target[FIT:]).float().mean().item()


def report(name: str, model, seed: int) -> list[str]:
    batch = kv_recall_batch(ROWS, LENGTH, DISTANCE, VOCAB, seed=seed, num_pairs=PAIRS)
    at = LENGTH - 1 - DISTANCE  # the asked value
    key, value = batch.input_ids[:, at - 1] - 1, batch.input_ids[:, at] - VOCAB // 2
    answer = batch.labels[:, -1] - VOCAB // 2
    lines = []
    for index, layer in enumerate(capture(model.eval(), batch.input_ids)):
        reads = f"{100 * probe(layer['read'], answer, 16):.0f}"
        if "h" in layer:
            reads += f" (h: {100 * probe(layer['h'], answer, 16):.0f})"
        lines.append(
            f"| {name} | {index} | {100 * probe(layer['v'][:, at], value, 16):.0f} | "
            f"{100 * probe(layer['k'][:, at].flatten(1), key, VOCAB // 2 - 1):.0f} | "
            f"{reads} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="*", type=Path)
    parser.add_argument("--init", action="append", default=[], help="an untrained model")
    parser.add_argument("--seed", type=int, default=5, help="of the probe batch and --init")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | layer | v -> value % | k -> key % | read -> answer % |")
    print("|---|---|---|---|---|")
    for path in args.checkpoints:
        print("\n".join(report(path.parts[-3], load_checkpoint(path).model, args.seed)))
    for name in args.init:
        torch.manual_seed(args.seed)
        config = build_config("recall", overrides=[f"model.name={name}"]).model
        model = create_model(name, **config.overrides)
        print("\n".join(report(f"{name}, untrained", model, args.seed)))


if __name__ == "__main__":
    main()
