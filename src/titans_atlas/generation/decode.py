"""Autoregressive generation, split as in gpt-fast: ``prefill`` / ``decode_one_token`` /
``generate``. The engine works on token ids only and knows nothing about tokenisation.

Axes: B batch, T tokens, V vocabulary.
Decoding is the model's streaming property with pieces of length 1: the ``ModelState`` from
the prompt carries memory weights, momentum and KV caches, so a step's cost does not grow with
the context for memory-only and sliding-window models. Sampling rules: ``sampling.py``.
Everything runs under ``torch.no_grad`` rather than ``inference_mode``: inference tensors
cannot enter a later autograd computation, and generated ids and states often do (e.g. a
scoring or fine-tuning pass on samples).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary

import torch

from ..common.sampling import check_generate_settings
from ..models.backbone import LanguageModel
from ..models.state import ModelState
from ..ops import validating
from ..validation import check_bool, check_token_ids
from .sampling import Sampler, SamplingConfig

Step = Callable[[torch.Tensor, ModelState], tuple[torch.Tensor, ModelState]]
_COMPILED_STEPS: WeakKeyDictionary[LanguageModel, dict[tuple, Step]] = WeakKeyDictionary()


@torch.no_grad()
def prefill(
    model: LanguageModel, prompt_ids: torch.Tensor, state: ModelState | None = None
) -> tuple[torch.Tensor, ModelState]:
    """One call over the whole prompt ``[B, T]`` (the model chunks it internally); returns the
    last position's logits ``[B, V]`` and the stream state after the prompt."""
    _check_model(model)
    _check_prompt(prompt_ids, model.config.vocab_size)
    logits, state = model(prompt_ids, state, last_only=True)
    return logits[:, -1], state


def compiled_decode_step(model: LanguageModel, **compile_options: Any) -> Step:
    """``step(token [B, 1], state) -> (logits [B, 1, V], state)``: the model's forward under
    ``torch.compile(**compile_options)``, built once per model and options and reused at every
    position (gpt-fast's compiled decode). Shapes never change while decoding -- ring KV caches,
    fixed-size memory states -- so after the first steps of a stream (the position turns
    symbolic; the memory's chunk phase adds a few graphs) nothing recompiles."""
    _check_model(model)
    key = tuple(sorted(compile_options.items()))
    steps = _COMPILED_STEPS.setdefault(model, {})
    if key not in steps:
        steps[key] = torch.compile(model, **compile_options)
    return steps[key]


@torch.no_grad()
def decode_one_token(
    model: LanguageModel,
    token: torch.Tensor,
    state: ModelState,
    sampler: Callable[[torch.Tensor], torch.Tensor],
    *,
    step: Step | None = None,
) -> tuple[torch.Tensor, torch.Tensor, ModelState]:
    """Feed ``token`` ``[B]`` (or ``[B, 1]``) through the stream; ``sampler`` maps logits
    ``[B, V]`` to tokens ``[B]``; ``step`` (e.g. ``compiled_decode_step(model)``) replaces the
    model's eager forward. Returns the next token ``[B]``, its logits ``[B, V]`` and the
    advanced state (``state`` itself is not modified)."""
    _check_model(model)
    if not isinstance(token, torch.Tensor) or token.ndim not in (1, 2) or token.shape[-1:] == (0,):
        raise ValueError("token must be a [B] or [B, 1] tensor of token ids")
    if not callable(sampler):
        raise ValueError(f"sampler must map logits to tokens, got {type(sampler).__name__}")
    logits, state = (model if step is None else step)(token.reshape(-1, 1), state)
    logits = logits[:, -1]
    return sampler(logits), logits, state


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompt_ids: torch.Tensor,
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
    compile: bool = False,
) -> torch.Tensor:
    """Continue ``prompt_ids`` ``[B, T]``; returns int64 ``[B, T + n]``, n <= max_new_tokens.

    A sample that emits one of ``stop_tokens`` is finished: its later positions hold
    ``pad_token``, or that stop token if None. Generation ends early (n < max_new_tokens)
    once every sample is finished. Same ``seed`` -> same tokens. ``compile=True`` decodes
    with ``compiled_decode_step(model)`` (compiled on first use, then reused).
    """
    config = SamplingConfig(temperature, top_k, top_p, min_p, repetition_penalty, greedy)
    stop_tokens = _check_generate_args(
        model, prompt_ids, max_new_tokens, stop_tokens, pad_token, seed, compile
    )
    decode_step = compiled_decode_step(model) if compile else None
    prompt_ids = prompt_ids.long()
    if max_new_tokens == 0:
        return prompt_ids.clone()
    sampler = Sampler(config, prompt_ids, model.config.vocab_size, seed)
    stops = torch.tensor(list(stop_tokens), dtype=torch.long, device=prompt_ids.device)
    last_logits, state = prefill(model, prompt_ids)
    token = sampler(last_logits)
    fill = torch.full_like(token, -1)  # [B] token that finished samples repeat; -1: running
    new_tokens = []
    for step in range(max_new_tokens):
        token = torch.where(fill >= 0, fill, token)
        new_tokens.append(token)
        fill = _mark_finished(token, fill, stops, pad_token)
        if step == max_new_tokens - 1 or (len(stops) and bool((fill >= 0).all())):
            break
        # the prefill checked the state's values; each step only continues it (as compiled)
        with validating(False):
            token, _, state = decode_one_token(model, token, state, sampler, step=decode_step)
    return torch.cat([prompt_ids, torch.stack(new_tokens, dim=1)], dim=1)


def _mark_finished(
    token: torch.Tensor, fill: torch.Tensor, stops: torch.Tensor, pad_token: int | None
) -> torch.Tensor:
    """Samples ``[B]`` that just emitted a stop token get their fill token (pad or that stop)."""
    just_stopped = (fill < 0) & torch.isin(token, stops)
    return torch.where(just_stopped, token if pad_token is None else pad_token, fill)


def _check_model(model: Any) -> None:
    if not isinstance(model, LanguageModel):
        raise ValueError(f"model must be a titans_atlas LanguageModel, got {type(model).__name__}")


def _check_prompt(prompt_ids: torch.Tensor, vocab_size: int) -> None:
    check_token_ids("prompt_ids", prompt_ids, vocab_size)
    if prompt_ids.shape[0] < 1 or prompt_ids.shape[1] < 1:
        raise ValueError(
            f"prompt_ids must hold >= 1 token per sample, got {tuple(prompt_ids.shape)}"
        )


def _check_generate_args(
    model: LanguageModel,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    stop_tokens: Sequence[int],
    pad_token: int | None,
    seed: int | None,
    compile: bool,
) -> tuple[int, ...]:
    """Check every argument of ``generate`` once; return the stop tokens as a tuple."""
    _check_model(model)
    vocab = model.config.vocab_size
    _check_prompt(prompt_ids, vocab)
    check_bool("compile", compile)
    return check_generate_settings(max_new_tokens, stop_tokens, pad_token, seed, vocab)
