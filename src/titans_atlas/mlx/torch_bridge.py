"""An MLX model behind the torch calling convention, so the torch side's command-line tools
run it unchanged: ``titans generate --backend mlx`` (the same sampler and options) and
``titans eval --backend mlx`` (every task, perplexity included).

``model(input_ids [B, T] int64 tensor, state, last_only=False) -> (logits [B, T, V] float32
tensor, state)``: ids go to MLX as int32, the MLX model computes, the logits come back to
torch; the state stays an MLX ``ModelState`` (opaque to the caller, passed back in as is).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import numpy as np
import torch
from mlx.utils import tree_flatten

from .models.backbone import LanguageModel, ModelState
from .models.pretrained import load_model


class TorchBridge:
    """Wraps an MLX ``LanguageModel``; ``config`` is the shared ``ModelConfig``."""

    backend = "mlx"

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.config = model.config

    def __call__(
        self, input_ids: torch.Tensor, state: ModelState | None = None, *, last_only: bool = False
    ) -> tuple[torch.Tensor, ModelState]:
        ids = mx.array(input_ids.detach().cpu().numpy().astype(np.int32))
        logits, state = self.model(ids, state, last_only=last_only)
        return torch.from_numpy(np.array(logits.astype(mx.float32))), state

    def num_parameters(self) -> int:
        return self.model.num_parameters()

    def eval(self) -> TorchBridge:
        return self

    def parameters(self) -> Iterator[torch.Tensor]:
        """The weights as CPU tensors (copies): what the memory estimate reads."""
        for _, weight in tree_flatten(self.model.parameters()):
            yield torch.from_numpy(np.array(weight))

    def buffers(self) -> Iterator[torch.Tensor]:
        return iter(())


def load_for_torch(directory: str | Path) -> TorchBridge:
    """A checkpoint folder (saved by either side) loaded into MLX, behind the torch API."""
    return TorchBridge(load_model(directory))
