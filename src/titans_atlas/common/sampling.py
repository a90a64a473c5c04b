"""The sampling rules of generation, for both backends: the settings (``SamplingConfig``)
and the order the logit filters run in -- HF transformers' order: repetition penalty,
temperature, top-k, top-p, min-p. Each backend supplies the filters as array code
(``generation/sampling.py``, ``mlx/generate.py``). Also the checks of ``generate``'s
settings that are not arrays.

Axes: B batch, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..validation import check_bool, check_int, check_number

Array = Any  # a torch.Tensor or an mlx.core.array


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen. ``greedy=True`` or ``temperature=0`` takes the argmax
    (after the repetition penalty); ``None`` turns a filter off."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    greedy: bool = False

    def __post_init__(self) -> None:
        check_number("temperature", self.temperature, 0.0, open_low=False)
        if self.top_k is not None:
            check_int("top_k", self.top_k, 1)
        if self.top_p is not None:
            check_number("top_p", self.top_p, 0.0, 1.0, open_high=False)
        if self.min_p is not None:
            check_number("min_p", self.min_p, 0.0, 1.0, open_low=False)
        check_number("repetition_penalty", self.repetition_penalty, 0.0)
        check_bool("greedy", self.greedy)

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0


@dataclass(frozen=True)
class LogitFilters:
    """One backend's filters, each ``(logits [B, V], setting) -> logits [B, V]`` (the
    repetition penalty also takes ``seen``, bool ``[B, V]``)."""

    repetition_penalty: Callable[[Array, Array, float], Array]
    top_k: Callable[[Array, int], Array]
    top_p: Callable[[Array, float], Array]
    min_p: Callable[[Array, float], Array]


def apply_sampling_rules(
    logits: Array, config: SamplingConfig, seen: Array | None, filters: LogitFilters
) -> Array:
    """Float32 logits ``[B, V]`` -> processed logits ``[B, V]``: repetition penalty (with
    ``seen``), then temperature, top-k, top-p, min-p; greedy stops after the penalty (the
    filters never remove the argmax)."""
    if seen is not None:
        logits = filters.repetition_penalty(logits, seen, config.repetition_penalty)
    if config.is_greedy:
        return logits
    if config.temperature != 1.0:
        logits = logits / config.temperature
    if config.top_k is not None:
        logits = filters.top_k(logits, config.top_k)
    if config.top_p is not None:
        logits = filters.top_p(logits, config.top_p)
    if config.min_p is not None:
        logits = filters.min_p(logits, config.min_p)
    return logits


def check_generate_settings(
    max_new_tokens: Any, stop_tokens: Any, pad_token: Any, seed: Any, vocab_size: int
) -> tuple[int, ...]:
    """``generate``'s arguments that are not arrays, checked the same way on both backends
    (ValueError naming the argument); returns the stop tokens as a tuple."""
    check_int("max_new_tokens", max_new_tokens, 0)
    if seed is not None:
        check_int("seed", seed, 0, 2**64 - 1)
    if isinstance(stop_tokens, str | bytes) or not isinstance(stop_tokens, Sequence):
        raise ValueError(f"stop_tokens must be a list or tuple of token ids, got {stop_tokens!r}")
    for token in stop_tokens:
        check_int("stop_tokens", token, 0, vocab_size - 1)
    if pad_token is not None:
        check_int("pad_token", pad_token, 0, vocab_size - 1)
    return tuple(stop_tokens)
