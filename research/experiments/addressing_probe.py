"""Why some recall seeds stay stuck (research/LOG.md, section 1): what a trained model's
memory layers write, and whether a query finds its own pair.

For trained checkpoints of the recall preset, one batch of its task (4 pairs among noise, the
4 keys asked again at the end) and, per memory layer and head:

* ``own`` / ``other``: the similarity q_p . k_s between the read query at an asked key
  (position p) and the write key at its own pair's value (position s), against the mean over
  the other 3 pairs' value positions. A memory whose keys carry the pair's identity reads its
  own pair more strongly than the others (``own - other`` away from 0);
* ``write value`` / ``write noise``: how strongly a token's gradient is written, at the pairs'
  value positions against the noise positions (what the memory chooses to write): the inner
  step theta_t, or with an Omega window of c taps the total sum_j theta_{t+j} gamma_{t+j,j}
  the token receives while it is in the window;
* ``conv k`` / ``conv q``: the root mean square over channels of the layer's causal
  convolution taps on keys and queries, by lag (0 = the token itself); PyTorch's
  initialisation gives 1 / sqrt(3 K) (0.29 at K = 4, 0.41 at K = 2);
* the accuracy of each of the 4 end queries in asking order. A model that remembers which
  values occurred but not which key each belongs to answers the k-th query at about
  1 / (5 - k) (by elimination of the values already asked): 25 / 33 / 50 / 100%.

    python research/experiments/recall_by_distance.py --model lmm --seed 1     # and --seed 3 ...
    python research/experiments/addressing_probe.py \
        runs/recall/lmm-seed1-*/checkpoints/step_00001500 \
        runs/recall/lmm-seed3-*/checkpoints/step_00001500
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from recall_by_distance import PAIRS, VOCAB  # experiments/ is on sys.path when run

from titans_atlas.eval.loading import load_checkpoint
from titans_atlas.layers import MemoryWrite, NeuralMemory, register_memory_hook
from titans_atlas.tasks import MultiQueryRecall

LENGTH, ROWS = 128, 256  # the recall preset's training length; rows in the probe batch


def capture_writes(model, inputs: torch.Tensor) -> tuple[torch.Tensor, list[tuple]]:
    """The model's logits ``[B, T, V]`` and each memory layer's (q, k, write) from what it
    hands ``memory_scan`` (``register_memory_hook``): ``[B, T, H, Dk]``, ``[B, T, H, Dk]``,
    ``[B, T, H]``."""
    seen = []

    def record(event):
        if isinstance(event, MemoryWrite):
            seen.append((event.q.detach(), event.k.detach(), write_weight(event.lr, event.omega)))

    layers = [m for m in model.modules() if isinstance(m, NeuralMemory)]
    handles = [register_memory_hook(layer, record) for layer in layers]
    try:
        with torch.no_grad():
            logits, _ = model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return logits, seen


def write_weight(lr: torch.Tensor, omega: torch.Tensor | None) -> torch.Tensor:
    """``[B, T, H]``: the weight token t's gradient gets in the writes, summed over the steps
    t + j whose window holds it (tap j); the last c - 1 tokens miss their later taps."""
    if omega is None:
        return lr
    length, total = lr.shape[1], torch.zeros_like(lr)
    for tap in range(omega.shape[-1]):  # step t + tap sees token t through tap `tap`
        total[:, : length - tap] += (lr * omega[..., tap])[:, tap:]
    return total


def pair_positions(inputs: torch.Tensor, labels: torch.Tensor):
    """Per row: the asked positions p (the end queries, in order) and, for each, the value
    position of its own pair and of the other pairs (before the tail)."""
    half = VOCAB // 2
    for row, label in zip(inputs, labels, strict=True):
        asked = (label >= 0).nonzero().flatten()
        stored = [t + 1 for t in range(int(asked[0]) - 1) if row[t] < half <= row[t + 1]]
        own = [next(s for s in stored if row[s - 1] == row[p]) for p in asked]
        yield asked, own, stored


def probe(path: Path, inputs: torch.Tensor, labels: torch.Tensor):
    """(the accuracy line, one conv-taps line per memory layer, the table rows)."""
    model = load_checkpoint(path).model
    logits, layers = capture_writes(model, inputs)
    right = (logits.argmax(-1) == labels).float()  # [B, T]
    asked_at = (labels >= 0).nonzero()[:, 1].unique()  # the same tail positions in every row
    accuracy = " / ".join(f"{100 * right[:, p].mean():.0f}" for p in asked_at)
    is_value = inputs >= VOCAB // 2
    body = torch.arange(LENGTH) < asked_at[0]  # the stored part, before the tail
    pairs = list(pair_positions(inputs, labels))  # the same for every layer
    memories = [m for m in model.modules() if isinstance(m, NeuralMemory)]
    convs, rows = [], []
    for index, ((q, k, write), memory) in enumerate(zip(layers, memories, strict=True)):
        own, other = [], []
        for row, (asked, mine, stored) in enumerate(pairs):
            for p, s in zip(asked, mine, strict=True):
                rest = [t for t in stored if t != s]
                own.append((q[row, p] * k[row, s]).sum(-1))  # [H]
                other.append((q[row, p] * k[row, rest]).sum(-1).mean(0))
        own_h, other_h = torch.stack(own).mean(0), torch.stack(other).mean(0)
        written = write[is_value & body].mean(0), write[~is_value & body].mean(0)  # [H] each
        convs.append(f"conv taps of layer {index} by lag: {conv_taps(memory)}")
        for head in range(q.shape[2]):
            rows.append(
                f"| {index} | {head} | {own_h[head]:.2f} | {other_h[head]:.2f} | "
                f"{own_h[head] - other_h[head]:+.2f} | {written[0][head]:.3f} | "
                f"{written[1][head]:.3f} |"
            )
    return f"{path}: accuracy of the end queries in order: {accuracy}%", convs, rows


def conv_taps(memory: NeuralMemory) -> str:
    """RMS over channels of the layer's k and q convolution taps, lag 0 first."""
    taps = {}
    for name in "kq":
        weight = memory.conv[name].conv.weight[:, 0]  # [D, K], tap K - 1 = lag 0
        taps[name] = " ".join(f"{x:.2f}" for x in weight.pow(2).mean(0).sqrt().flip(0).tolist())
    return f"k {taps['k']}; q {taps['q']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--seed", type=int, default=7, help="of the probe batch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = MultiQueryRecall(vocab_size=VOCAB, seq_len=LENGTH, num_pairs=PAIRS)
    inputs, labels = task.sample(ROWS, torch.Generator().manual_seed(args.seed))
    for path in args.checkpoints:
        accuracy, convs, rows = probe(path, inputs, labels)
        print(f"\n{accuracy}\n")
        print("\n".join(convs) + "\n")
        print("| layer | head | own | other | own - other | write value | write noise |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))


if __name__ == "__main__":
    main()
