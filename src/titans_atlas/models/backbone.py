"""The Llama-style backbone every architecture shares, and its explicit streaming state (the
model registry is ``registry.py``, the saved-model format ``pretrained.py``).

Axes: B batch, T tokens, D model width, V vocabulary.
An architecture is a ``Block`` class -- ``forward(x [B, T, D], state, position) -> (x, state)``
-- registered with the defaults that define it; everything else lives here.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..layers.neural_memory import NeuralMemory
from ..ops import validating
from ..ops.checks import value_checks_enabled
from ..validation import check_bool, check_token_ids, compiling
from .config import ModelConfig
from .pretrained import CheckpointError, load_model, save_model
from .registry import (  # noqa: F401  (re-exported: the registry's old home)
    MODELS,
    build_model,
    create_model,
    list_models,
    model_config,
    register,
)
from .state import ModelState, check_state, state_fingerprint

INIT_STD = 0.02


class LanguageModel(nn.Module):
    """Embedding -> blocks -> RMSNorm -> LM head. ``forward(ids [B, T], state) -> (logits
    [B, T, V], state)``; any split of a sequence over calls gives the logits of one call."""

    block_class: type[nn.Module]  # with ``state_class``, the type of its stream state

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.fingerprint = state_fingerprint(config)
        self.validate = True
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(self.block_class(config) for _ in range(config.depth))
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self, std: float = INIT_STD) -> None:
        """(Re-)initialise every parameter in place, each module through its own
        ``init_weights``: N(0, std) for embeddings and projections, std / sqrt(2 depth) for the
        projections that write into the residual stream (GPT-2's scaling: the stream's variance
        then stays O(1) in depth). Draws from the global RNG. This is how a model built on the
        meta device is materialised: ``model.to_empty(device=...)``, then ``init_weights()``."""
        out_std = std / math.sqrt(2 * self.config.depth)
        self.tie_weights()  # to_empty() may have replaced the tied tensors by separate ones
        nn.init.normal_(self.embed.weight, std=std)
        for block in self.blocks:
            block.init_weights(std, out_std)
        self.norm.reset_parameters()
        if not self.config.tie_embeddings:
            nn.init.normal_(self.head.weight, std=std)

    def tie_weights(self) -> None:
        """Make the LM head share the embedding's Parameter when the config ties them."""
        if self.config.tie_embeddings:
            self.head.weight = self.embed.weight

    def set_runtime(
        self,
        memory_impl: str | None = None,
        memory_checkpoint: bool | None = None,
        validate: bool | None = None,
    ) -> LanguageModel:
        """Run-time choices -- never saved with the weights. ``memory_impl``: "auto" (default),
        "chunk", "reference", "token" or "triton" (fused GPU kernels, docs/gpu.md);
        ``memory_checkpoint``: recompute each memory chunk in backward (default False);
        ``validate``: check input values (token ids in range, once per call; the memory
        layers' inputs and states finite; default True; skipped anyway while torch.compile
        traces): False reads no tensor value on the hot path. None leaves a choice as it is. Returns
        the model."""
        if validate is not None:
            check_bool("validate", validate)
            self.validate = validate
        for module in self.modules():
            if isinstance(module, NeuralMemory):
                module.set_runtime(impl=memory_impl, checkpoint=memory_checkpoint)
        return self

    def forward(
        self, input_ids: torch.Tensor, state: ModelState | None = None, *, last_only: bool = False
    ) -> tuple[torch.Tensor, ModelState]:
        """``last_only=True`` returns only the last position's logits ``[B, 1, V]`` (a long
        prompt's prefill need not hold T x V logits)."""
        self._check(input_ids, state, last_only)
        batch = input_ids.shape[0]
        if state is None:
            state = ModelState(0, [None] * len(self.blocks), batch, self.fingerprint)
        if input_ids.shape[1] == 0:  # nothing to read or write: the stream stands still
            return self.head.weight.new_zeros(*input_ids.shape, self.config.vocab_size), state
        if input_ids.dtype not in (torch.int64, torch.int32):  # what nn.Embedding takes
            input_ids = input_ids.to(torch.int64)
        x = self.embed(input_ids)
        block_states = []
        # validate=False also silences the memory layers' value checks (a host sync each)
        with nullcontext() if self.validate else validating(False):
            for block, block_state in zip(self.blocks, state.blocks):
                x, block_state = block(x, block_state, state.position)
                block_states.append(block_state)
        logits = self.head(self.norm(x[:, -1:] if last_only else x))
        end = state.position + input_ids.shape[1]
        return logits, ModelState(end, block_states, batch, self.fingerprint)

    def _check(self, input_ids: torch.Tensor, state: ModelState | None, last_only: bool) -> None:
        """Once per call, at the boundary: shapes, types and the state's fingerprint always
        (Python attributes, free); the id range (a host sync) when ``validate`` is on and
        torch.compile is not tracing."""
        vocab = self.config.vocab_size if self.validate and not compiling() else None
        check_token_ids("input_ids", input_ids, vocab)
        check_bool("last_only", last_only)
        if state is not None:
            kinds = tuple(block.state_class for block in self.blocks)
            # the caches' values (a host sync) as the memory layers' are: validate on, the
            # ops.validating default on, not while torch.compile traces
            values = self.validate and value_checks_enabled() and not compiling()
            check_state(state, self.fingerprint, kinds, input_ids.shape[0], values=values)

    def compile_blocks(self, **compile_options: Any) -> LanguageModel:
        """Compile each block in place with ``torch.compile(**compile_options)``, torchtitan's
        per-block compile: the blocks of one model share their graphs; the embedding, head and
        boundary checks stay eager. Parameter names do not change (checkpoints load either
        way). ``fullgraph=True`` insists on one graph per block: true for SWA and the
        Transformer, and for the Titans models once memory_scan skips its value checks under
        compile. Returns the model."""
        for block in self.blocks:
            block.compile(**compile_options)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` (no pickle) to ``directory``."""
        save_model(self, directory)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> LanguageModel:
        """Load a model written by ``save_pretrained`` (``titans_atlas.load_model``): on
        ``device``, in the saved dtype or ``dtype``. Called on a subclass, the checkpoint must
        hold that architecture."""
        model = load_model(directory, device=device, dtype=dtype)
        if not isinstance(model, cls):
            raise CheckpointError(
                f"{directory} holds a {model.config.name!r} model, not a {cls.__name__}"
            )
        return model
