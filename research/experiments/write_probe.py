"""How strongly each chunk writes into the memory, on chunks that hold a key-value pair and
on chunks of noise (research/LOG.md, section 1: why Muon fails past the training length).

Muon replaces the momentum S by NS5(S), which first divides S by its norm: the step
theta NS5(S) has the same size whether the chunk's gradients were large or small, and only
the gate theta can make a noise chunk write less. A gradient-descent memory writes theta S,
which also shrinks when the chunk's gradients do. Over the 128-token training sequences few
noise chunks follow a pair; over 2,048 tokens ~120 do. This probe streams the length test's
batches (``kv_recall_batch``, 4 pairs among noise; value tokens are the upper half of the
vocabulary) one memory chunk per call and reports,
per memory layer, medians over rows and chunks of:

* ``write``: |keep W_before - W_after| / |W_before| of the chunk, all heads and weights
  together, where keep = prod (1 - alpha_t) over the chunk's tokens per head: the chunk's
  update without the decay's share (exact for decay toward zero, the runs probed here);
* ``|S|``: the momentum's norm after the chunk (what NS5 normalises away);
* ``theta``: the inner learning rate gate, averaged over the chunk's tokens and heads;
* ``alpha``: the decay gate, likewise (the layer bounds it below by ``decay_min``);

for chunks with a pair and chunks of noise, in the first 128 tokens and in tokens 1,024-2,048.
A chunk "holds a pair" when a value token lies in it or in the ``omega_window - 1`` tokens
before it: with the Omega window a token's step carries the gradients of the c - 1 tokens
before it, so a pair is still written after its chunk ends. (A short convolution carries it
a token or few further, which this test does not count: small for the 2-tap runs.)
Then an oracle that reads the labels: recall at 2,048 tokens with theta set to 0 in every
chunk without a pair, against recall as trained -- what the model would recall if noise
chunks added nothing. (Under the momentum rule theta scales the gradient into the momentum,
so a noise chunk then adds no new gradient, while the momentum carried from earlier chunks
still steps; under per-chunk Muon theta scales the chunk's one step, so a noise chunk then
does not step at all, though its gradients still enter the momentum, which is unscaled.)
Last, where the decay gates sit: the share of (token, head) decay gates in the first 128
tokens below 2e-3 and below 2e-4 (twice a floor of 1e-3 and of 1e-4), and their median.

    python research/experiments/write_probe.py \
        runs/recall/omeganet-seed3-b6589fc6/checkpoints/step_00001500 \
        runs/recall/atlas-seed3-4b5a9c39/checkpoints/step_00001500
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch
from _common import set_decay_floor  # experiments/ is on sys.path when run
from length_probe import flat_weights, memory_state
from recall_by_distance import PAIRS, VOCAB

from titans_atlas.eval.loading import load_checkpoint
from titans_atlas.eval.recall import kv_recall_batch
from titans_atlas.layers import MemoryWrite, NeuralMemory, register_memory_hook

LONG, TRAIN = 2048, 128
KEYS = ("write", "|S|", "theta", "alpha")
SPANS = {"first 128": (0, TRAIN), "1,024-2,048": (LONG // 2, LONG)}


def momentum_norm(block_state) -> torch.Tensor:
    """``[B]``: the norm of a block's memory momentum, all heads and tensors together."""
    momentum = memory_state(block_state).momentum
    return torch.cat([momentum[n].flatten(1) for n in sorted(momentum)], dim=-1).norm(dim=-1)


def instrument(model) -> tuple[list[list[tuple[torch.Tensor, torch.Tensor]]], dict]:
    """Hook each memory layer's writes (``register_memory_hook``): every call appends its
    theta and alpha ``[B, T, H]`` to the layer's list, and multiplies theta by
    ``scale["theta"]`` ``[B]`` when that is set (the oracle below)."""
    seen, scale = [], {"theta": None}
    for layer in (m for m in model.modules() if isinstance(m, NeuralMemory)):
        calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        seen.append(calls)

        def hook(event, calls=calls):
            if not isinstance(event, MemoryWrite):
                return None
            lr = event.lr
            if scale["theta"] is not None:
                lr = lr * scale["theta"][:, None, None]
            calls.append((lr.detach(), event.decay.detach()))
            return dataclasses.replace(event, lr=lr)

        register_memory_hook(layer, hook)
    return seen, scale


def holds_pair(inputs: torch.Tensor, chunk: int, omega_window: int) -> torch.Tensor:
    """``[B, N]``: whether chunk n of each row writes a pair -- a value token in the chunk
    or in the ``omega_window - 1`` tokens before it."""
    value = (inputs >= VOCAB // 2).float()[:, None]  # [B, 1, T]
    reach = torch.nn.functional.max_pool1d(
        torch.nn.functional.pad(value, (omega_window - 1, 0)), omega_window, stride=1
    )  # [B, 1, T]: a value token within the last omega_window tokens
    return reach[:, 0].unflatten(1, (-1, chunk)).any(-1)


@torch.no_grad()
def chunk_stats(model, inputs: torch.Tensor, chunk: int, gate_calls) -> dict[str, torch.Tensor]:
    """Per layer, chunk and row: write size, momentum norm, mean theta and alpha
    ``[L, N, B]``; and whether each chunk of each row writes a pair ``[N, B]``."""
    state, writes, norms = None, [], []
    before = [flat_weights(b.memory.initial_state(inputs.shape[0])) for b in model.blocks]
    for start in range(0, inputs.shape[1], chunk):
        _, state = model(inputs[:, start : start + chunk], state)
        after = [flat_weights(b) for b in state.blocks]
        keep = [(1 - calls[-1][1]).prod(dim=1)[..., None] for calls in gate_calls]  # [B, H, 1]
        writes.append([
            (k * b - a).flatten(1).norm(dim=-1) / b.flatten(1).norm(dim=-1)
            for a, b, k in zip(after, before, keep)
        ])  # fmt: skip
        norms.append([momentum_norm(b) for b in state.blocks])
        before = after
    lr, decay = (
        torch.stack([torch.stack([c[i].mean(dim=(1, 2)) for c in calls]) for calls in gate_calls])
        for i in (0, 1)
    )
    pairs = holds_pair(inputs, chunk, model.config.memory.omega_window).T  # [N, B]
    stack = lambda rows: torch.stack([torch.stack(r) for r in rows]).transpose(0, 1)  # noqa: E731
    return {"write": stack(writes), "|S|": stack(norms), "theta": lr, "alpha": decay, "pair": pairs}


@torch.no_grad()
def oracle_recall(model, chunk: int, scale: dict, rows: int, seed: int) -> list[str]:
    """Recall % at 2,048 tokens with the answer 64 and 2,032 back, as trained and with
    theta set to 0 in every chunk without a pair (an oracle that reads the labels: what
    recall would be if noise chunks added nothing new; the module docstring says what that
    means per update rule)."""
    out = []
    for quiet in (False, True):
        for distance in (64, LONG - 16):
            batch = kv_recall_batch(rows, LONG, distance, VOCAB, seed=seed + distance,
                                    num_pairs=PAIRS)  # fmt: skip
            state, window = None, model.config.memory.omega_window
            writes_pair = holds_pair(batch.input_ids, chunk, window)  # [B, N]
            for start in range(0, LONG, chunk):
                piece = batch.input_ids[:, start : start + chunk]
                pair = writes_pair[:, start // chunk].float()
                scale["theta"] = pair if quiet else None
                logits, state = model(piece, state)
            scale["theta"] = None
            hits = logits[:, -1].argmax(-1) == batch.labels[:, -1]
            out.append(f"{100 * hits.float().mean():.0f}")
    return out


def gate_floor(gate_calls, chunk: int) -> list[tuple[int, list[str]]]:
    """Per layer: the share of decay gates (tokens x heads x rows) of the first TRAIN tokens
    of ``chunk_stats``'s stream below 2e-3 and 2e-4, and their median."""
    out = []
    for layer, calls in enumerate(gate_calls):
        decay = torch.cat([alpha for _, alpha in calls[: TRAIN // chunk]], dim=1).flatten()
        shares = [f"{100 * (decay < bound).float().mean():.0f}%" for bound in (2e-3, 2e-4)]
        out.append((layer, [*shares, f"{decay.median():.2g}"]))
    return out


def summary(stats: dict[str, torch.Tensor], chunk: int) -> list[list[str]]:
    """Per layer: for each span and chunk kind, ``write / |S| / theta / alpha`` medians."""
    lines = []
    for layer in range(stats["write"].shape[0]):
        cells = []
        for low, high in SPANS.values():
            span = slice(low // chunk, high // chunk)
            for kind in (True, False):
                mask = stats["pair"][span] == kind
                values = [stats[key][layer, span][mask].median() for key in KEYS]
                cells.append(" / ".join(f"{v:.3g}" for v in values))
        lines.append(cells)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7, help="of the probe batch")
    parser.add_argument("--test-decay-min", type=float, default=None,
                        help="probe with the memory's decay floor at this value")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch = kv_recall_batch(args.rows, LONG, LONG - 16, VOCAB, seed=args.seed, num_pairs=PAIRS)
    head = [f"{span}, {kind}" for span in SPANS for kind in ("pair chunks", "noise chunks")]
    print("| run | layer | " + " | ".join(head) + " |  (each: " + " / ".join(KEYS) + ")")
    print("|---|---|" + "---|" * len(head))
    oracle, floors = [], []
    for path in args.checkpoints:
        model = load_checkpoint(path).model.eval()
        if args.test_decay_min is not None:
            set_decay_floor(model, args.test_decay_min)
        chunk = model.config.memory.chunk_size
        calls, scale = instrument(model)
        stats = chunk_stats(model, batch.input_ids, chunk, calls)
        for layer, cells in enumerate(summary(stats, chunk)):
            print(f"| {path.parts[-3]} | {layer} | " + " | ".join(cells) + " |", flush=True)
        floors += [(path.parts[-3], layer, cells) for layer, cells in gate_floor(calls, chunk)]
        oracle.append((path.parts[-3], oracle_recall(model, chunk, scale, args.rows, args.seed)))
    print("\n| run | recall % at 2,048 tokens, answer 64 / 2,032 back: as trained | "
          "noise chunks' theta set to 0 |")  # fmt: skip
    print("|---|---|---|")
    for name, cells in oracle:
        print(f"| {name} | {' / '.join(cells[:2])} | {' / '.join(cells[2:])} |")
    print("\n| run | layer | decay gates < 2e-3 | < 2e-4 | median (first 128 tokens) |")
    print("|---|---|---|---|---|")
    for name, layer, cells in floors:
        print(f"| {name} | {layer} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
