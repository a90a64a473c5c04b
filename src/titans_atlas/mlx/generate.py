"""Autoregressive generation in MLX, split as the torch side's ``titans_atlas.generate``:
``prefill`` / ``decode_one_token`` / ``generate``, with the same sampling options
(``SamplingConfig`` is shared) and the same logits processing order: repetition penalty,
temperature, top-k, top-p, min-p.

Axes: B batch, T tokens, V vocabulary. The engine works on token ids only. Sampling draws from
its own ``mx.random`` key chain (the global MLX seed is never touched); the same seed gives the
same tokens on MLX, but not the tokens torch's generator draws. Greedy decoding matches torch.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from ..common.sampling import (
    LogitFilters,
    SamplingConfig,
    apply_sampling_rules,
    check_generate_settings,
)
from .models.backbone import LanguageModel, ModelState

__all__ = [
    "Sampler",
    "SamplingConfig",
    "apply_min_p",
    "apply_repetition_penalty",
    "apply_top_k",
    "apply_top_p",
    "decode_one_token",
    "generate",
    "prefill",
    "process_logits",
]

NEG_INF = float("-inf")


def apply_repetition_penalty(logits: mx.array, seen: mx.array, penalty: float) -> mx.array:
    """Divide positive / multiply negative logits ``[B, V]`` of tokens already in the sequence
    (``seen``, bool ``[B, V]``) by ``penalty``."""
    if penalty == 1.0:
        return logits
    penalized = mx.where(logits > 0, logits / penalty, logits * penalty)
    return mx.where(seen, penalized, logits)


def apply_top_k(logits: mx.array, k: int) -> mx.array:
    """Keep the ``k`` largest logits ``[B, V]`` (ties with the k-th kept); the rest -> -inf."""
    k = min(k, logits.shape[-1])
    kth = mx.topk(logits, k, axis=-1).min(axis=-1, keepdims=True)  # [B, 1]
    return mx.where(logits < kth, NEG_INF, logits)


def apply_top_p(logits: mx.array, p: float) -> mx.array:
    """Keep the smallest set of most likely tokens whose probability sums to >= ``p`` (at
    least one token); the rest of ``[B, V]`` -> -inf."""
    if p >= 1.0:
        return logits
    order = mx.argsort(-logits, axis=-1)  # [B, V], most likely first
    probs = mx.softmax(mx.take_along_axis(logits, order, axis=-1), axis=-1)
    mass_before = mx.cumsum(probs, axis=-1) - probs  # [B, V] mass of the more likely tokens
    drop_sorted = (mass_before >= p) & (mx.arange(logits.shape[-1]) > 0)
    drop = mx.put_along_axis(mx.zeros(logits.shape, dtype=mx.bool_), order, drop_sorted, axis=-1)
    return mx.where(drop, NEG_INF, logits)


def apply_min_p(logits: mx.array, min_p: float) -> mx.array:
    """Drop tokens of ``[B, V]`` whose probability is < ``min_p`` x the top probability."""
    probs = mx.softmax(logits, axis=-1)
    threshold = min_p * probs.max(axis=-1, keepdims=True)  # [B, 1]
    return mx.where(probs < threshold, NEG_INF, logits)


FILTERS = LogitFilters(apply_repetition_penalty, apply_top_k, apply_top_p, apply_min_p)


def process_logits(
    logits: mx.array, config: SamplingConfig, seen: mx.array | None = None
) -> mx.array:
    """Next-token logits ``[B, V]`` -> processed float32 logits ``[B, V]`` (the rules and their
    order: ``common/sampling.py``)."""
    return apply_sampling_rules(logits.astype(mx.float32), config, seen, FILTERS)


def _one_hot(tokens: mx.array, vocab_size: int) -> mx.array:
    return mx.arange(vocab_size)[None, :] == tokens.reshape(-1, 1)  # bool [B, V]


class Sampler:
    """``sampler(logits [B, V]) -> tokens [B]``, drawing from its own key chain and tracking
    which tokens each sequence holds (for the repetition penalty)."""

    def __init__(
        self, config: SamplingConfig, prompt_ids: mx.array, vocab_size: int, seed: int | None = None
    ) -> None:
        self.config, self.vocab_size = config, vocab_size
        self.key = mx.random.key(secrets.randbits(63) if seed is None else seed)
        seen = mx.zeros((prompt_ids.shape[0], vocab_size), dtype=mx.bool_)
        self.seen = mx.put_along_axis(seen, prompt_ids.astype(mx.int32), mx.array(True), axis=1)

    def __call__(self, logits: mx.array) -> mx.array:
        logits = process_logits(logits, self.config, self.seen)
        if self.config.is_greedy:
            tokens = mx.argmax(logits, axis=-1)
        else:
            self.key, draw = mx.random.split(self.key)
            tokens = mx.random.categorical(logits, axis=-1, key=draw)
        tokens = tokens.astype(mx.int32)
        self.seen = self.seen | _one_hot(tokens, self.vocab_size)
        return tokens  # [B]


def as_ids(ids: object, name: str = "prompt_ids") -> mx.array:
    """Token ids (an ``mx.array``, numpy array, torch tensor or nested list) as an int32
    ``mx.array`` ``[B, T]``."""
    if not isinstance(ids, mx.array):
        if hasattr(ids, "detach"):  # a torch tensor
            ids = ids.detach().cpu().numpy()
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ValueError(f"{name} must be integer token ids, got {ids.dtype}")
        ids = mx.array(ids.astype(np.int32))
    if ids.ndim != 2:
        raise ValueError(f"{name} must be [B, T] token ids, got shape {list(ids.shape)}")
    if not mx.issubdtype(ids.dtype, mx.integer):
        raise ValueError(f"{name} must be integer token ids, got {ids.dtype}")
    return ids.astype(mx.int32)


def prefill(
    model: LanguageModel, prompt_ids: mx.array, state: ModelState | None = None
) -> tuple[mx.array, ModelState]:
    """One call over the whole prompt ``[B, T]``; the last position's logits ``[B, V]`` and the
    stream state after the prompt."""
    prompt_ids = as_ids(prompt_ids)
    if prompt_ids.shape[0] < 1 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must hold >= 1 token per sample, got {prompt_ids.shape}")
    logits, state = model(prompt_ids, state, last_only=True)
    return logits[:, -1], state


def decode_one_token(
    model: LanguageModel,
    token: mx.array,
    state: ModelState,
    sampler: Callable[[mx.array], mx.array],
) -> tuple[mx.array, mx.array, ModelState]:
    """Feed ``token`` ``[B]`` through the stream; returns the next token ``[B]``, its logits
    ``[B, V]`` and the advanced state (evaluated, so the lazy graph never outgrows a step)."""
    logits, state = model(token.reshape(-1, 1), state)
    logits = logits[:, -1]
    token = sampler(logits)
    mx.eval(token, logits, *state.arrays())
    return token, logits, state


def generate(
    model: LanguageModel,
    prompt_ids: mx.array,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    seed: int | None = None,
    stop_tokens: Sequence[int] = (),
    greedy: bool = False,
    pad_token: int | None = None,
) -> mx.array:
    """Continue ``prompt_ids`` ``[B, T]``; returns int32 ``[B, T + n]``, n <= max_new_tokens.

    As ``titans_atlas.generate.generate``: a sample that emits one of ``stop_tokens`` is
    finished (later positions hold ``pad_token``, or that stop token if None); generation ends
    once every sample is finished. Same ``seed`` -> same tokens.
    """
    config = SamplingConfig(temperature, top_k, top_p, min_p, repetition_penalty, greedy)
    prompt_ids = as_ids(prompt_ids)
    _check_prompt(model, prompt_ids)
    vocab = model.config.vocab_size
    stop_tokens = check_generate_settings(max_new_tokens, stop_tokens, pad_token, seed, vocab)
    if max_new_tokens == 0:
        return prompt_ids
    sampler = Sampler(config, prompt_ids, model.config.vocab_size, seed)
    stops = mx.array(list(stop_tokens), dtype=mx.int32)
    last_logits, state = prefill(model, prompt_ids)
    token = sampler(last_logits)
    fill = mx.full(token.shape, -1, dtype=mx.int32)  # [B] token finished samples repeat
    new_tokens = []
    for step in range(max_new_tokens):
        token = mx.where(fill >= 0, fill, token)
        new_tokens.append(token)
        if len(stop_tokens):
            just_stopped = (fill < 0) & (token[:, None] == stops[None, :]).any(axis=1)
            fill = mx.where(just_stopped, token if pad_token is None else pad_token, fill)
        if step == max_new_tokens - 1 or (len(stop_tokens) and bool((fill >= 0).all().item())):
            break
        token, _, state = decode_one_token(model, token, state, sampler)
    return mx.concatenate([prompt_ids, mx.stack(new_tokens, axis=1)], axis=1)


def _check_prompt(model: LanguageModel, prompt_ids: mx.array) -> None:
    if prompt_ids.shape[0] < 1 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must hold >= 1 token per sample, got {prompt_ids.shape}")
    vocab = model.config.vocab_size
    if not bool(((prompt_ids >= 0) & (prompt_ids < vocab)).all().item()):
        raise ValueError(f"prompt_ids must lie in [0, {vocab})")
