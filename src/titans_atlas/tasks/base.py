"""What every synthetic task shares: the label of an unscored position, the batch of the
evaluation's builders, and the protocol of a training task.

Axes: B batch rows, T tokens.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

IGNORE = -100  # label of an unscored position (torch's cross_entropy ignore_index)


class Batch(NamedTuple):
    """A training / evaluation batch. ``labels[:, t]`` is the token that should follow
    ``input_ids[:, t]`` (already shifted), or -100 where nothing is scored:
    ``loss = cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)``."""

    input_ids: torch.Tensor  # [B, T] int64
    labels: torch.Tensor  # [B, T] int64


class Task(Protocol):
    """A task may also carry a ``tokenizer`` (its ids are text; without one its ids stand
    for nothing and the run saves an ``IdTokenizer``), a ``validation()`` method returning
    the task validation draws from (held-out items; without one, fresh draws of itself), and
    a ``sample_stream(ages, stream_seeds, generator)`` method for facts that last a carried
    stream (``persistent_recall``), which stream mode then calls instead of ``sample``."""

    vocab_size: int  # ids lie in [0, vocab_size)

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
