"""What the training loop reports beyond the loss: non-finite values named by step and
parameter, per-layer memory statistics, the evaluation line. Kept out of ``loop.py`` so that
file reads as the loop's control flow."""

from __future__ import annotations

import math

import torch

from .distributed import Parallel, local_tensor
from .runtime import memory_layers, memory_state_norms


class NonFiniteError(RuntimeError):
    """A loss or gradient went inf / NaN; the message names the step and the parameters."""


def non_finite_parameters(model: torch.nn.Module) -> tuple[list[str], list[str]]:
    """Names of parameters / gradients with inf or NaN (this rank's shard under FSDP2)."""
    bad_params, bad_grads = [], []
    for name, param in model.named_parameters():
        if not torch.isfinite(local_tensor(param)).all():
            bad_params.append(name)
        if param.grad is not None and not torch.isfinite(local_tensor(param.grad)).all():
            bad_grads.append(name)
    return bad_params, bad_grads


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every entry of every tensor is finite, with one host sync for the whole list:
    a sync per tensor would drain a GPU's launch queue once per parameter every step."""
    flags = [torch.isfinite(tensor).all() for tensor in tensors]
    if not flags:
        return True
    return bool(torch.stack([flag.to(flags[0].device) for flag in flags]).all())


def check_finite(
    model: torch.nn.Module, parallel: Parallel, step: int, loss: float, carried=None
) -> None:
    """NonFiniteError on every rank when any rank's loss, parameters or gradients are not
    finite; ``step`` is the step being taken, before its optimizer step. The parameters'
    names, and the norms of the memory state ``carried`` into the step (stream mode), are
    looked up only once something is wrong."""
    params = [local_tensor(p) for p in model.parameters()]
    grads = [local_tensor(p.grad) for p in model.parameters() if p.grad is not None]
    finite = all_finite(params + grads) and math.isfinite(loss)
    if parallel.any(not finite):
        bad_params, bad_grads = non_finite_parameters(model)
        where = "" if parallel.world_size == 1 else f" (names from rank {parallel.rank})"
        norms = [round(n, 2) for n in memory_state_norms(carried)]
        raise NonFiniteError(
            f"step {step}: loss {loss}; "
            f"non-finite parameters{where}: {bad_params or 'none'}; "
            f"non-finite gradients: {bad_grads or 'none'}; "
            f"memory state norms carried into the step: {norms or 'none (fresh state)'}. "
            "Stopped before the optimizer step: no checkpoint holds these values."
        )


def memory_stats(
    model: torch.nn.Module, state, gates: list[dict[str, float]]
) -> list[dict[str, float]]:
    """Per memory layer: the gates ``GateStats`` recorded and the norm of the memory's state
    after the last micro-batch."""
    norms = memory_state_norms(state)
    stats = []
    for i, _ in enumerate(memory_layers(model)):
        entry = dict(gates[i]) if i < len(gates) else {}
        if i < len(norms):
            entry["state_norm"] = norms[i]
        stats.append(entry)
    return stats


def eval_line(step: int, result: dict[str, float]) -> str:
    parts = [f"eval @ step {step}: loss {result['val_loss']:.4f}"]
    if "val_bpb" in result:
        parts.append(f"bits/byte {result['val_bpb']:.4f}")
    parts.append(f"accuracy {result['val_accuracy']:.3f}")
    return ", ".join(parts)
