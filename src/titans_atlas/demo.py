"""A two-minute tour: ``python -m titans_atlas.demo``.

1. The memory engine stores key -> value pairs at test time and recalls them.
2. A model streams a long byte sequence in pieces with a state of constant size, and the
   streamed logits equal one call on the whole sequence.
3. The same streaming state generates text (the model is untrained: expect gibberish).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import titans_atlas as ta
from titans_atlas.generation import generate

# The repository's shared data folder, when run from the repository root; random bytes otherwise.
SHAKESPEARE = Path("../shared/data/tinyshakespeare/input.txt")


def recall_demo(pairs: int = 32, dim: int = 32) -> None:
    """Write ``pairs`` random key -> value pairs into an MLP memory, then read them back."""
    memory = ta.MLPMemory(dim_in=dim, dim_out=dim, expansion=4)
    keys = F.normalize(torch.randn(1, pairs, 1, dim), dim=-1)  # [B, T, H, Dk]
    values = torch.randn(1, pairs, 1, dim)
    state = memory.initial_state(memory.init_weights(num_heads=1), batch_size=1)
    write, silent = torch.full((1, pairs, 1), 0.1), torch.zeros(1, pairs, 1)

    def recall_error(current):
        read, _ = ta.memory_scan(
            memory, keys, keys, values, silent, silent, silent, current, chunk_size=1
        )
        return ((read - values) ** 2).mean().item() / (values**2).mean().item()

    print(
        f"[1] memory engine: {pairs} random key -> value pairs, MLP memory {dim}->{4 * dim}->{dim}"
    )
    print(f"    relative recall error before writing: {recall_error(state):.3f}")
    for _ in range(40):  # test-time learning: gradient steps on the inner loss, no optimizer
        _, state = ta.memory_scan(
            memory, keys, keys, values, write, silent, silent, state, chunk_size=1
        )
    print(f"    after 40 passes of test-time learning: {recall_error(state):.2e}")


def load_bytes(length: int) -> torch.Tensor:
    if SHAKESPEARE.is_file():
        data = SHAKESPEARE.read_bytes()[:length]
        return torch.tensor(list(data), dtype=torch.long)[None]
    return torch.randint(0, 256, (1, length))


def streaming_demo(name: str, length: int, piece: int) -> None:
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=128, depth=2, num_heads=4, window=64, chunk_size=16
    ).eval()
    ids = load_bytes(length)
    print(
        f"\n[2] model {name!r} ({model.num_parameters() / 1e6:.2f}M parameters), "
        f"streaming {ids.shape[1]} bytes in pieces of {piece}"
    )
    state, logits, sizes, start = None, [], [], time.perf_counter()
    with torch.no_grad():
        for lo in range(0, ids.shape[1], piece):
            out, state = model(ids[:, lo : lo + piece], state)
            logits.append(out)
            sizes.append(state.nbytes())
        elapsed = time.perf_counter() - start
        whole, _ = model(ids)
    kb = [size / 1e3 for size in sizes]
    print(
        f"    {ids.shape[1] / elapsed:,.0f} tokens/s; state after each piece: {kb[0]:.1f} kB "
        f"first, {max(kb):.1f} kB max, {kb[-1]:.1f} kB last (bounded)"
    )
    diff = (torch.cat(logits, dim=1) - whole).abs().max().item()
    print(f"    streamed logits vs one call on the whole sequence: max |diff| = {diff:.1e}")

    prompt = ids[:, :64]
    out = generate(model, prompt, max_new_tokens=48, temperature=0.8, top_k=40, seed=0)
    text = "".join(chr(t) if 32 <= t < 127 else "." for t in out[0, 64:].tolist())
    print(f"\n[3] generation after a 64-byte prompt (untrained weights, so noise): {text!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="atlas", choices=ta.list_models())
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--piece", type=int, default=200)  # crosses chunk and segment edges
    args = parser.parse_args()
    torch.manual_seed(0)
    recall_demo()
    streaming_demo(args.model, args.tokens, args.piece)


if __name__ == "__main__":
    main()
