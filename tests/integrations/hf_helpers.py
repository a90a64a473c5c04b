"""Helpers for the integration tests: tiny models, and a tiny model trained on a sentence
(transformers is never imported here: each test module skips without it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import titans_atlas as ta

# Small enough for milliseconds per call, with windows and chunks that prompts cross.
TINY = {"vocab_size": 256, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}
SENTENCE = "the cat sat on the mat. "


def tiny(name: str, seed: int = 0, **overrides) -> ta.LanguageModel:
    """A tiny model whose parameters are moved away from the init (a re-init would show)."""
    torch.manual_seed(seed)
    model = ta.create_model(name, **{**TINY, **overrides})
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    return model.eval()


def train_on_sentence(steps: int = 80) -> ta.LanguageModel:
    """LMM trained with plain AdamW on a repeated sentence, bytes as tokens."""
    torch.manual_seed(0)
    model = ta.create_model("lmm", **{**TINY, "dim": 32, "window": 16, "chunk_size": 8})
    data = torch.tensor(list((SENTENCE * 40).encode()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    windows = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - 33, (8,), generator=windows)
        batch = torch.stack([data[s : s + 33] for s in starts])  # [8, 33]
        logits, _ = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
