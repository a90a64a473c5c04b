"""Sampling rules for generation, in HF transformers' order: repetition penalty,
temperature, top-k, top-p, min-p (``SamplingConfig`` checks the settings; ``Sampler`` draws).

Axes: B batch, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validation import check_bool, check_int, check_number


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


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalty: float
) -> torch.Tensor:
    """Divide positive / multiply negative logits ``[B, V]`` of tokens already in the sequence
    (``seen``, bool ``[B, V]``) by ``penalty`` (HF's RepetitionPenaltyLogitsProcessor)."""
    if penalty == 1.0:
        return logits
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits ``[B, V]`` (ties with the k-th kept); the rest -> -inf."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # [B, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability sums to >= ``p`` (at
    least one token); the rest of ``[B, V]`` -> -inf."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # [B, V] mass of the more likely tokens
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens of ``[B, V]`` whose probability is < ``min_p`` x the top probability."""
    probs = logits.softmax(dim=-1)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values  # [B, 1]
    return logits.masked_fill(probs < threshold, float("-inf"))


def process_logits(
    logits: torch.Tensor, config: SamplingConfig, seen: torch.Tensor | None = None
) -> torch.Tensor:
    """Next-token logits ``[B, V]`` -> processed float32 logits ``[B, V]``: repetition penalty
    (needs ``seen``, bool ``[B, V]``), then temperature, top-k, top-p, min-p."""
    logits = logits.float()
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, config.repetition_penalty)
    if config.is_greedy:
        return logits  # the filters below never remove the argmax
    if config.temperature != 1.0:
        logits = logits / config.temperature
    if config.top_k is not None:
        logits = apply_top_k(logits, config.top_k)
    if config.top_p is not None:
        logits = apply_top_p(logits, config.top_p)
    if config.min_p is not None:
        logits = apply_min_p(logits, config.min_p)
    return logits


class Sampler:
    """``sampler(logits [B, V]) -> tokens [B]``. Draws from its own ``torch.Generator`` (the
    global RNG is never touched) and tracks which tokens each sequence holds, for the
    repetition penalty: the prompt at construction, then every token it returns."""

    def __init__(
        self,
        config: SamplingConfig,
        prompt_ids: torch.Tensor,
        vocab_size: int,
        seed: int | None = None,
    ) -> None:
        self.config = config
        self.generator = torch.Generator(device=prompt_ids.device)
        if seed is None:
            self.generator.seed()  # non-deterministic, and local to this generator
        else:
            self.generator.manual_seed(seed)
        seen = torch.zeros(
            prompt_ids.shape[0], vocab_size, dtype=torch.bool, device=prompt_ids.device
        )
        self.seen = seen.scatter_(1, prompt_ids.long(), True)  # [B, V]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        logits = process_logits(logits, self.config, self.seen)
        if self.config.is_greedy:
            tokens = logits.argmax(dim=-1)
        else:
            probs = logits.softmax(dim=-1)
            tokens = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        self.seen.scatter_(1, tokens[:, None], True)
        return tokens  # [B]
