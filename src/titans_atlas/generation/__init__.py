"""Generation, split as in gpt-fast: ``prefill`` / ``decode_one_token`` / ``generate``
(``decode.py``) and the sampling rules (``sampling.py``). The engine works on token ids only;
the ``titans generate`` command (text in, text out) is ``titans_atlas.cli.generate``."""

from __future__ import annotations

from .decode import compiled_decode_step, decode_one_token, generate, prefill
from .sampling import (
    Sampler,
    SamplingConfig,
    apply_min_p,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
    process_logits,
)

__all__ = [
    "Sampler",
    "SamplingConfig",
    "apply_min_p",
    "apply_repetition_penalty",
    "apply_top_k",
    "apply_top_p",
    "compiled_decode_step",
    "decode_one_token",
    "generate",
    "prefill",
    "process_logits",
]
