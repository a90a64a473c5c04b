"""The Llama-style backbone every MLX architecture shares, and its explicit streaming state
(mirrors ``titans_atlas.models.backbone``; the registry is ``registry.py``).

Axes: B batch, T tokens, D model width, V vocabulary.
Configs are the torch side's ``ModelConfig`` (same presets, same ``config.json``); an
architecture is a block class registered under the torch registry's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ...models.config import ModelConfig
from ..layers.basic import normal_init
from ..layers.neural_memory import NeuralMemory
from ..ops.state import arrays_of, map_arrays
from .pretrained import save_model
from .registry import (  # noqa: F401  (re-exported: the registry's old home)
    MODELS,
    build_model,
    create_model,
    list_models,
    register,
)

IMPLS = ("auto", "chunk", "reference")


@dataclass
class ModelState:
    """A stream through a model: the next position and each block's own state."""

    position: int
    blocks: list[Any]
    batch_size: int
    model: str = ""  # the architecture that made it: a state is only valid for that model

    def detach(self) -> ModelState:
        """Cut the autograd graph (truncated backpropagation through time)."""
        return map_arrays(self, mx.stop_gradient)

    def arrays(self) -> list[mx.array]:
        """Every array the state holds (e.g. to ``mx.eval`` it)."""
        return arrays_of(self)

    def nbytes(self) -> int:
        """Bytes of the arrays the state holds, each shared array counted once."""
        return sum({id(a): a.nbytes for a in self.arrays()}.values())


class LanguageModel(nn.Module):
    """Embedding -> blocks -> RMSNorm -> LM head. ``model(ids [B, T], state) -> (logits
    [B, T, V], state)``; any split of a sequence over calls gives the logits of one call."""

    block_class: type[nn.Module]

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config, self.validate = config, True
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        normal_init(self.embed)
        self.blocks = [self.block_class(config) for _ in range(config.depth)]
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        if not config.tie_embeddings:
            self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
            normal_init(self.head)

    def logits(self, x: mx.array) -> mx.array:
        """``[B, T, D]`` -> ``[B, T, V]`` through the final norm and the (tied) head."""
        x = self.norm(x)
        return self.head(x) if "head" in self else self.embed.as_linear(x)

    def __call__(
        self, input_ids: mx.array, state: ModelState | None = None, *, last_only: bool = False
    ) -> tuple[mx.array, ModelState]:
        """``last_only=True`` returns only the last position's logits ``[B, 1, V]``."""
        self._check(input_ids, state)
        if state is None:
            state = ModelState(0, [None] * len(self.blocks), input_ids.shape[0], self.config.name)
        if input_ids.shape[1] == 0:  # nothing to read or write: the stream stands still
            shape = (*input_ids.shape, self.config.vocab_size)
            return mx.zeros(shape, dtype=self.embed.weight.dtype), state
        x = self.embed(input_ids)
        block_states = []
        for block, block_state in zip(self.blocks, state.blocks):
            x, block_state = block(x, block_state, state.position)
            block_states.append(block_state)
        logits = self.logits(x[:, -1:] if last_only else x)
        end = state.position + input_ids.shape[1]
        return logits, ModelState(end, block_states, input_ids.shape[0], self.config.name)

    def _check(self, input_ids: mx.array, state: ModelState | None) -> None:
        if not isinstance(input_ids, mx.array) or input_ids.ndim != 2:
            raise ValueError("input_ids must be an mx.array [B, T] of token ids")
        if not mx.issubdtype(input_ids.dtype, mx.integer):
            raise ValueError(f"input_ids must be integer token ids, got {input_ids.dtype}")
        vocab = self.config.vocab_size
        if (
            self.validate
            and input_ids.size
            and not bool(((input_ids >= 0) & (input_ids < vocab)).all().item())
        ):
            raise ValueError(f"input_ids must lie in [0, {vocab})")
        if state is not None:
            if (
                not isinstance(state, ModelState)
                or len(state.blocks) != len(self.blocks)
                or state.model != self.config.name
            ):
                raise ValueError("state must be a ModelState returned by this model")
            if state.batch_size != input_ids.shape[0]:
                raise ValueError(
                    f"state is for batch {state.batch_size}, input_ids has {input_ids.shape[0]}"
                )

    def set_runtime(
        self, memory_impl: str = "auto", compiled: bool = True, validate: bool = True
    ) -> LanguageModel:
        """Runtime choices, never saved: the memory scan form, whether its chunk steps run
        ``mx.compile``d, and whether inputs are checked by value (token id range, NaN, gate
        ranges); ``validate=False`` lets a whole training step run under ``mx.compile``.
        Returns the model."""
        if memory_impl not in IMPLS:
            raise ValueError(f"memory_impl must be one of {IMPLS}, got {memory_impl!r}")
        self.validate = bool(validate)
        for _, module in self.named_modules():
            if isinstance(module, NeuralMemory):
                module.impl, module.compiled = memory_impl, bool(compiled)
                module.validate = bool(validate)
        return self

    def num_parameters(self) -> int:
        return sum(p.size for _, p in tree_flatten(self.parameters()))

    def save_pretrained(self, directory: str) -> None:
        """Write ``config.json`` and ``model.safetensors`` (torch-loadable) to ``directory``."""
        save_model(self, directory)
