"""The MLP memory's activations and their slopes, elementwise on any shape.

The inner gradient of an MLP memory (``MemoryModel.grad_factors``) needs both act(z) and
act'(z) at every pre-activation z, and the outer loss differentiates through both, so autograd
also needs act''(z). Written as plain torch ops, act'(z) records five or six elementwise nodes
that each save a z-sized tensor for the backward; ``activation_with_slope`` is one node that
saves z alone and recomputes the rest, with ``activation_with_slope_reference`` (the plain
ops, same signature) beside it for the parity tests. Its backward is written in torch ops, so
higher derivatives still work.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

INV_SQRT2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def activation(name: str, z: torch.Tensor) -> torch.Tensor:
    """GELU (exact, erf form) or SiLU."""
    return F.gelu(z) if name == "gelu" else F.silu(z)


def _gaussian(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The standard normal's cdf Phi(z) and pdf phi(z) (GELU is z Phi(z))."""
    cdf = 0.5 * (1.0 + torch.erf(z * INV_SQRT2))
    return cdf, torch.exp(-0.5 * z * z) * INV_SQRT_2PI


def activation_with_slope_reference(name: str, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(act(z), act'(z)) in plain differentiable torch ops."""
    if name == "gelu":  # d/dz [z Phi(z)] = Phi(z) + z phi(z)
        cdf, pdf = _gaussian(z)
        return F.gelu(z), cdf + z * pdf
    sig = torch.sigmoid(z)  # d/dz [z s(z)] = s + z s (1 - s)
    return F.silu(z), sig * (1.0 + z * (1.0 - sig))


def _slope_and_curvature(name: str, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """act'(z) and act''(z)."""
    if name == "gelu":  # act'' = phi (2 - z^2)
        cdf, pdf = _gaussian(z)
        return cdf + z * pdf, pdf * (2.0 - z * z)
    sig = torch.sigmoid(z)  # act'' = s (1 - s) (2 + z (1 - 2 s))
    return sig * (1.0 + z * (1.0 - sig)), sig * (1.0 - sig) * (2.0 + z * (1.0 - 2.0 * sig))


class _ActivationWithSlope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, name: str):
        ctx.name = name
        ctx.save_for_backward(z)
        return activation_with_slope_reference(name, z)  # autograd is off in here

    @staticmethod
    def backward(ctx, g_act: torch.Tensor, g_slope: torch.Tensor):
        (z,) = ctx.saved_tensors
        slope, curvature = _slope_and_curvature(ctx.name, z)
        return g_act * slope + g_slope * curvature, None


def activation_with_slope(name: str, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(act(z), act'(z)) as one autograd node that saves only z: same values and
    derivatives as ``activation_with_slope_reference``."""
    if not (torch.is_grad_enabled() and z.requires_grad):
        return activation_with_slope_reference(name, z)
    return _ActivationWithSlope.apply(z, name)
