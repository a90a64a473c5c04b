"""Why recall fails past the training length (research/LOG.md, section 1): forgetting, or a
long stream that leaves the memory where training never took it.

For trained checkpoints of the recall preset (128-token training sequences), on the length
test's batches (``kv_recall_batch``: 4 pairs among noise, one asked at the end):

* ``recall``: accuracy at 128 tokens with the answer 64 back, and at 2,048 tokens with the
  answer 64 back and 2,032 back. A model that forgets old pairs fails only the last; a
  model that a long stream breaks fails the middle one too, though the pair is as near as
  in training;
* ``|W|``: the norm of each memory layer's weights (all heads and tensors together, median
  over rows) at the start (the learned initial weights) and after 128 and 2,048 tokens, on
  the batch with the answer 64 back in 2,048 tokens.

    python research/experiments/length_probe.py runs/recall/lmm-seed3-*/checkpoints/step_00001500 \
        runs/recall/atlas-seed3-*/checkpoints/step_00001500
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from recall_by_distance import PAIRS, VOCAB  # experiments/ is on sys.path when run

from titans_atlas.eval.loading import load_checkpoint
from titans_atlas.eval.recall import kv_recall_batch
from titans_atlas.layers.neural_memory import MemoryLayerState

TRAIN, LONG = 128, 2048  # the recall preset's training length; 16x it
CASES = ((TRAIN, 64), (LONG, 64), (LONG, LONG - 16))  # (length, distance of the answer)


def memory_state(block_state):
    """The memory's ``MemoryState`` inside an lmm-like or MAC/MAG block state."""
    layer = block_state if isinstance(block_state, MemoryLayerState) else block_state.memory
    return layer.memory


def flat_weights(block_state) -> torch.Tensor:
    """``[B, H, P]``: the memory weights of a block state, joined."""
    weights = memory_state(block_state).weights
    return torch.cat([weights[name].flatten(2) for name in sorted(weights)], dim=-1)


def stream(model, inputs: torch.Tensor, chunk: int, marks: tuple[int, ...]):
    """Stream ``inputs [B, T]`` one chunk per call (the split does not change the result):
    the last position's prediction ``[B]`` and the norms of each memory layer's weights
    ``[L, 1 + len(marks), B]``: at the start and after each of ``marks`` tokens."""
    rows, state = inputs.shape[0], None
    norms = [[norm(block.memory.initial_state(rows)) for block in model.blocks]]
    with torch.no_grad():
        for start in range(0, inputs.shape[1], chunk):
            logits, state = model(inputs[:, start : start + chunk], state)
            if start + chunk in marks:
                norms.append([norm(block) for block in state.blocks])
    return logits[:, -1].argmax(-1), torch.tensor(norms).transpose(0, 1)


def norm(block_state) -> list[float]:
    """Per row: the norm of a block's memory weights, all heads and tensors together."""
    return flat_weights(block_state).flatten(1).norm(dim=-1).tolist()


def probe(path: Path, rows: int, seed: int) -> list[str]:
    model = load_checkpoint(path).model.eval()
    chunk = model.config.memory.chunk_size
    recall, sizes = [], None
    for length, distance in CASES:
        seeded = seed + distance
        batch = kv_recall_batch(rows, length, distance, VOCAB, seed=seeded, num_pairs=PAIRS)
        answer, norms = stream(model, batch.input_ids, chunk, (TRAIN, LONG))
        recall.append(f"{100 * (answer == batch.labels[:, -1]).float().mean():.0f}")
        if (length, distance) == (LONG, 64):
            sizes = norms.median(dim=-1).values  # [L, 3]
    return [
        f"| {path.parts[-3]} | {' / '.join(recall)} | {layer} | "
        + " / ".join(f"{x:.1f}" for x in size.tolist())
        + " |"
        for layer, size in enumerate(sizes)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7, help="of the probe batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        "| run | recall %: 128 tokens, answer 64 back / 2,048, 64 back / 2,048, 2,032 back "
        "| layer | abs(W): start / 128 / 2,048 tokens |"
    )
    print("|---|---|---|---|")
    for path in args.checkpoints:
        print("\n".join(probe(path, args.rows, args.seed)), flush=True)


if __name__ == "__main__":
    main()
