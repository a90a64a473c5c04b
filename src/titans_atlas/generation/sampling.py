"""Sampling for generation in torch: the logit filters and the ``Sampler`` that draws; the
settings (``SamplingConfig``) and the order of the rules are ``common/sampling.py``'s.

Axes: B batch, V vocabulary.
"""

from __future__ import annotations

import torch

from ..common.sampling import LogitFilters, SamplingConfig, apply_sampling_rules


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
    return apply_sampling_rules(logits.float(), config, seen, FILTERS)


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


FILTERS = LogitFilters(apply_repetition_penalty, apply_top_k, apply_top_p, apply_min_p)
