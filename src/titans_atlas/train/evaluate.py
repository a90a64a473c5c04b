"""Validation: mean loss per scored token, bits per byte (the headline metric: comparable
across tokenizers), and accuracy on the scored positions (what a synthetic task reports).

Axes: B batch rows, T tokens, V vocabulary.
bits per byte = (sum of losses in nats) / ln 2 / (UTF-8 bytes of the scored tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..models.backbone import LanguageModel
from ..models.rows import reset_rows
from ..tasks import IGNORE


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-position loss in nats ``[B, T]`` (0 where unscored), computed in fp32."""
    return F.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="none"
    ).view_as(labels)


@torch.no_grad()
def evaluate(
    model: LanguageModel,
    batches,
    num_batches: int,
    *,
    stream: bool,
    byte_lengths: torch.Tensor | None,
    device: torch.device,
    autocast=None,
    reset: Callable = reset_rows,
    reduce: Callable[[list[float]], list[float]] | None = None,
) -> dict[str, float]:
    """Run ``num_batches`` validation batches; in stream mode the state is carried as in
    training (rows started with ``reset``, ``reset_rows``'s signature). Returns ``val_loss``
    (nats/token), ``val_bpb`` (when bytes are known), ``val_accuracy`` and ``val_tokens``.
    ``reduce`` sums [nats, bytes, scored, correct] over the ranks of a distributed run."""
    was_training = model.training
    model.eval()
    nats = bytes_ = 0.0
    scored = correct = 0
    state = None
    try:
        for _ in range(num_batches):
            batch = batches.next()
            inputs, labels = batch.inputs.to(device), batch.labels.to(device)
            state = reset(model, state, batch.reset) if stream else None
            with autocast if autocast is not None else torch.autocast("cpu", enabled=False):
                logits, state = model(inputs, state)
            mask = labels != IGNORE
            nats += float(token_losses(logits, labels).sum(dtype=torch.float64))
            scored += int(mask.sum())
            correct += int(((logits.argmax(-1) == labels) & mask).sum())
            if byte_lengths is not None:
                bytes_ += float(byte_lengths.to(device)[labels[mask]].sum())
    finally:
        model.train(was_training)
    if reduce is not None:
        nats, bytes_, scored, correct = reduce([nats, bytes_, scored, correct])
        scored, correct = round(scored), round(correct)
    result = {
        "val_loss": nats / max(scored, 1),
        "val_accuracy": correct / max(scored, 1),
        "val_tokens": scored,
    }
    if byte_lengths is not None and bytes_ > 0:
        result["val_bpb"] = nats / math.log(2) / bytes_
    return result
