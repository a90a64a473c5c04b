"""What every synthetic task shares: the label of an unscored position, the batch of the
evaluation's builders, and the protocol of a training task.

Axes: B batch rows, T tokens.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch

from ..validation import check_int

IGNORE = -100  # label of an unscored position (torch's cross_entropy ignore_index)


def task_arg(name: str) -> str:
    """How a run's config names a training task's argument: ``train.seq_len`` for the
    sequence length, ``data.task_args.NAME`` for the others."""
    return "train.seq_len" if name == "seq_len" else f"data.task_args.{name}"


def check_task_ints(task: object, minimums: dict[str, int], optional: tuple[str, ...] = ()) -> None:
    """Each field ``name`` of ``task`` in ``minimums`` must be an integer (not a bool, a float
    or a string) >= its minimum (``check_int``, named as the run's config names it); those in
    ``optional`` may also be None (the default). Checked when the task is built, so a bad
    ``data.task_args`` value is one ValueError naming it before the run starts, not a
    TypeError from the first batch."""
    for name, minimum in minimums.items():
        value: Any = getattr(task, name)
        if not (value is None and name in optional):
            check_int(task_arg(name), value, minimum)


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
