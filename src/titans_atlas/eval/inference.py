"""The two honest ways a model answers: the greedy continuation it generates, and the
likelihood it gives each candidate label. Both stream the prompt in pieces with the state
carried (``logits, state = model(piece, state=state)``), so a prompt of any length costs one
piece's activations plus the state.

Axes: B batch (always 1 here), T tokens, V vocabulary.
Any object with ``config.vocab_size`` and ``model(ids [B, T], state=None, last_only=False)
-> (logits [B, T, V], state)`` is a model here: a ``LanguageModel`` or a hand-built one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..compiling import DecodeStep, check_compile_setting
from ..generation.decode import compiled_decode_step
from ..memory_estimate.inference import (
    InferenceEstimate as MemoryEstimate,
)
from ..memory_estimate.inference import (
    available_memory,
    check_memory,
    estimate_peak_memory,
)
from ..models.backbone import LanguageModel

DEFAULT_PIECE = 2048


@dataclass
class Evaluator:
    """A model ready to answer prompts: streams in pieces of ``piece_size`` tokens and checks,
    before each length it has not seen, that the memory it needs is free (unless ``force``)."""

    model: Any
    piece_size: int = DEFAULT_PIECE
    force: bool = False
    check_budget: bool = True
    # called with (tokens read, tokens in all) after each piece of a long input: progress
    on_tokens: Callable[[int, int], None] | None = None
    # greedy decoding's one-token steps: "auto" compiles them once eager decoding has taken
    # long enough to pay (titans_atlas.compiling); torch LanguageModels only
    compile: bool | str = False

    def __post_init__(self) -> None:
        if not isinstance(self.piece_size, int) or self.piece_size < 1:
            raise ValueError(f"piece_size must be an int >= 1, got {self.piece_size!r}")
        self._checked: dict[int, MemoryEstimate] = {}
        setting = check_compile_setting("compile", self.compile)
        if not isinstance(self.model, LanguageModel):
            setting = False  # an MLX model behind the torch API, or a hand-built one
        self.decode = DecodeStep(
            self.model, lambda: compiled_decode_step(self.model), setting, self.device
        )

    @property
    def device(self) -> torch.device:
        for tensor in self.model.parameters():
            return tensor.device
        return torch.device("cpu")

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def ensure_memory(self, length: int) -> MemoryEstimate | None:
        """Estimate the peak memory of ``length`` tokens and refuse (MemoryBudgetError) when
        it exceeds what the device has free. Lengths are rounded up to a power of two so the
        probes run once per octave."""
        if not self.check_budget or getattr(self.model, "backend", "torch") != "torch":
            return None  # the estimate walks torch modules; an MLX model is not checked
        key = 1 << max(0, int(length) - 1).bit_length()
        if key not in self._checked:
            estimate = estimate_peak_memory(self.model, key, self.piece_size)
            check_memory(estimate, available_memory(self.device), self.force)
            self._checked[key] = estimate
        return self._checked[key]

    def as_tensor(self, ids: Sequence[int]) -> torch.Tensor:
        tensor = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)[None]
        if tensor.numel() and (tensor.min() < 0 or tensor.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        return tensor  # [1, T]

    @torch.no_grad()
    def prefill(self, ids: Sequence[int], state: Any = None) -> tuple[torch.Tensor, Any]:
        """Stream ``ids`` (non-empty); returns the last position's logits ``[V]`` (float32)
        and the state after them."""
        if len(ids) == 0:
            raise ValueError("prefill needs at least one token")
        tokens = self.as_tensor(ids)
        for start in range(0, tokens.shape[1], self.piece_size):
            logits, state = self.model(
                tokens[:, start : start + self.piece_size], state=state, last_only=True
            )
            self._report(start + self.piece_size, tokens.shape[1])
        return logits[0, -1].float(), state

    def _report(self, done: int, total: int) -> None:
        if self.on_tokens is not None and total > self.piece_size:
            self.on_tokens(min(done, total), total)

    @torch.no_grad()
    def greedy(
        self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int] = ()
    ) -> list[int]:
        """The argmax continuation of ``prompt_ids``: up to ``max_new_tokens`` ids, ending
        early after a token of ``stop_ids``."""
        logits, state = self.prefill(prompt_ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            token = int(logits.argmax())
            out.append(token)
            if token in stop_ids or len(out) == max_new_tokens:
                break
            next_logits, state = self.decode(self.as_tensor([token]), state)
            logits = next_logits[0, -1].float()
        return out

    @torch.no_grad()
    def continuation_logprob(
        self, last_logits: torch.Tensor, state: Any, continuation: Sequence[int]
    ) -> tuple[float, bool]:
        """Log-probability of ``continuation`` after a prefilled prompt (its last logits
        ``[V]`` and state, which is not changed), streamed in pieces, and whether every token
        of it is the argmax (the greedy continuation)."""
        if len(continuation) == 0:
            raise ValueError("a continuation must hold at least one token")
        tokens = self.as_tensor(continuation)[0]  # [n]
        previous, total, greedy = last_logits[None], 0.0, True
        for start in range(0, len(tokens), self.piece_size):
            piece = tokens[start : start + self.piece_size]
            logits, state = self.model(piece[None], state=state)
            predictions = torch.cat([previous, logits[0, :-1].float()])  # [P, V]
            logprobs = F.log_softmax(predictions, dim=-1)
            total += float(logprobs.gather(1, piece[:, None]).double().sum())
            greedy = greedy and bool((predictions.argmax(dim=-1) == piece).all())
            previous = logits[0, -1:].float()
        return total, greedy

    def rank_candidates(
        self, prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]]
    ) -> list[float]:
        """Total log-probability of each candidate continuation of ``prompt_ids`` (the prompt
        is streamed once; each candidate continues from the same state)."""
        last_logits, state = self.prefill(prompt_ids)
        return [self.continuation_logprob(last_logits, state, c)[0] for c in candidates]

    @torch.no_grad()
    def all_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, V]`` of a batch ``[B, T]``, streamed in pieces with the state
        carried (equal to one call)."""
        if input_ids.ndim != 2:
            raise ValueError("input_ids must be a [B, T] tensor")
        input_ids = input_ids.to(self.device)
        outputs, state = [], None
        for start in range(0, input_ids.shape[1], self.piece_size):
            logits, state = self.model(input_ids[:, start : start + self.piece_size], state=state)
            outputs.append(logits)
            self._report(start + self.piece_size, input_ids.shape[1])
        return torch.cat(outputs, dim=1)
