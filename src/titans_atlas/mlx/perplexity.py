"""Streaming log-likelihood of token ids under an MLX model: the sequence is fed in pieces
with the state carried, so memory stays flat at any length (what ``titans eval`` perplexity
needs from a backend).

Axes: B batch, T tokens, V vocabulary.
"""

from __future__ import annotations

import math

import mlx.core as mx

from ..validation import check_int
from .generate import as_ids
from .models.backbone import LanguageModel, ModelState


def token_log_likelihoods(
    model: LanguageModel,
    ids: mx.array,
    *,
    piece_tokens: int = 512,
    state: ModelState | None = None,
) -> tuple[mx.array, ModelState]:
    """log p(ids[:, t] | ids[:, :t]) for t = 1..T-1, float32 ``[B, T - 1]``, computed over
    pieces of ``piece_tokens``; returns it and the state after the last token. (With a
    ``state``, the first token is still not scored: no logits for it were kept.)"""
    ids = as_ids(ids, "ids")
    check_int("piece_tokens", piece_tokens, 1)
    scores = []
    for start in range(0, ids.shape[1], piece_tokens):
        piece = ids[:, start : start + piece_tokens]
        logits, state = model(piece, state)
        # logits at t predict token t + 1; the piece's last one predicts the next piece's first
        targets = ids[:, start + 1 : start + piece.shape[1] + 1]  # [B, L'] (L' = L or L - 1)
        logits = logits[:, : targets.shape[1]].astype(mx.float32)
        log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        scores.append(mx.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0])
        mx.eval(scores[-1], *state.arrays())  # bound the lazy graph to one piece
    if state is None:
        state = ModelState(0, [None] * len(model.blocks), ids.shape[0], model.config.name)
    return mx.concatenate(scores, axis=1) if scores else mx.zeros((ids.shape[0], 0)), state


def perplexity(model: LanguageModel, ids: mx.array, *, piece_tokens: int = 512) -> float:
    """exp(mean negative log-likelihood) of ``ids`` ``[B, T]`` (T >= 2), streamed."""
    ids = as_ids(ids, "ids")
    if ids.shape[1] < 2:
        raise ValueError(f"ids must hold >= 2 tokens per sample, got shape {list(ids.shape)}")
    scores, _ = token_log_likelihoods(model, ids, piece_tokens=piece_tokens)
    return math.exp(-scores.mean().item())
