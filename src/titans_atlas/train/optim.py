"""AdamW with two parameter groups and a warmup + cosine schedule.

Weight decay pulls a weight towards zero, which is right for projection matrices and wrong
for parameters whose zero is not "off": norms (zero silences a channel), biases (the memory's
gate biases set its untrained learning rate, momentum and forgetting), the memory's initial
weights (its starting point at every stream start), persistent tokens, and feature-map
coefficients. Those go in the group without decay.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import OptimConfig

# Name fragments of parameters that take no weight decay (see the module docstring).
NO_DECAY_NAMES = ("initial_weights", "persistent", "poly_coefficients", "to_gates")


def no_decay(name: str, param: nn.Parameter, module: nn.Module) -> bool:
    """Biases, norm weights (every 1-D parameter), the memory's gate projection, initial
    weights, persistent tokens and feature-map coefficients."""
    return (
        param.ndim < 2
        or isinstance(module, nn.RMSNorm | nn.LayerNorm)
        or any(part in name for part in NO_DECAY_NAMES)
    )


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """``[{decayed params}, {the rest}]``, each parameter once (tied weights counted once)."""
    owners = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            owners.setdefault(id(param), (f"{module_name}.{name}".lstrip("."), param, module))
    decay, keep = [], []
    for full_name, param, module in owners.values():
        if param.requires_grad:
            (keep if no_decay(full_name, param, module) else decay).append((full_name, param))
    return [
        {
            "params": [p for _, p in decay],
            "names": [n for n, _ in decay],
            "weight_decay": weight_decay,
        },
        {"params": [p for _, p in keep], "names": [n for n, _ in keep], "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, config: OptimConfig) -> torch.optim.AdamW:
    groups = parameter_groups(model, config.weight_decay)
    return torch.optim.AdamW(
        groups, lr=config.lr, betas=(config.beta1, config.beta2), eps=config.eps
    )


def learning_rate(step: int, total_steps: int, config: OptimConfig) -> float:
    """Linear warmup over ``warmup_steps`` (step 0 already has a non-zero rate), then cosine
    from ``lr`` down to ``min_lr_ratio * lr`` at ``total_steps``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    span = max(total_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    floor = config.min_lr_ratio * config.lr
    return floor + 0.5 * (config.lr - floor) * (1 + math.cos(math.pi * progress))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
