"""The per-token recurrence with its weight-sized arithmetic fused: the decoding path.

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, C chunk size, c Omega window.
Same arguments and result as ``memory_scan_reference`` (its twin, ``scan_reference.py``, and
the float64 parity tests in tests/ops/test_scan_token.py). A decode step is a one-token call,
and there the memory's time goes to passes over its weights, ``[B, H, Dk, Dv]`` each: the
reference makes six per weight and token (the gradient, eta S, theta G, their difference,
(1 - alpha) W, the sum); here the step and the Omega gates are folded into the small factor
``a`` ``[B, H, c, Dk]``, so the gradient is accumulated into the momentum by one batched
matmul-add and the weights by one fused multiply-add: three passes (per-token Muon: NS5
through its fused form, ``newton_schulz5``).
"""

from __future__ import annotations

import torch

from .newton_schulz import newton_schulz5
from .options import ScanInputs
from .scan_reference import muon_steps_at, per_token_loop
from .state import MemoryState, TensorDict


def memory_scan_token(inputs: ScanInputs) -> tuple[torch.Tensor, MemoryState]:
    """The recurrence of ``memory_scan_reference``, one token at a time (its loop,
    ``per_token_loop``), weights updated by fused operations (inputs checked, in the compute
    dtype, halo prepared)."""
    return per_token_loop(inputs, _fused_step)


def _fused_step(options, t, weights, mom, factors, gamma, theta, eta, alpha, target):
    """``_reference_step``'s update with the step folded into the factors ``a``."""
    gamma = gamma[..., None]  # [B, H, c, 1]
    if options.update_rule == "momentum":
        # S_t = eta S - theta sum_j gamma_j a_j^T b_j ; W_t = (1 - alpha) W + S_t
        mom = _accumulate(mom, factors, eta, -theta * gamma)
        weights = {n: torch.addcmul(mom[n], 1 - alpha, weights[n]) for n in mom}
    else:  # ATLAS Muon: S_t = eta S + G ; W_t = (1 - alpha) W - theta NS5(S_t) when it steps
        mom = _accumulate(mom, factors, eta, gamma)
        steps = muon_steps_at(options, t)
        weights = {
            n: torch.addcmul((1 - alpha) * weights[n], theta, newton_schulz5(mom[n]), value=-1)
            if steps
            else (1 - alpha) * weights[n]
            for n in mom
        }
    if target is not None:  # W_t + alpha A (docs/memory.md, section 10)
        weights = {n: torch.addcmul(w, alpha, target[n]) for n, w in weights.items()}
    return weights, mom


def _accumulate(mom: TensorDict, factors, eta: torch.Tensor, scale: torch.Tensor) -> TensorDict:
    """eta S + sum_j (scale_j a_j)^T b_j per weight, the sum over the c taps as one batched
    matmul-add: ``[B*H, Dk, c] @ [B*H, c, Dv]`` added to eta S ``[B*H, Dk, Dv]``."""
    out = {}
    for name, (a, b) in factors.items():
        # [B, H, Dk, Dv], this call's own tensor. The product takes mom's layout, which need
        # not be [B, H]-major (a caller's state, a gate broadcast over B): then flatten(0, 1)
        # below would copy and the in-place add be lost, so make it contiguous (free if it is)
        decayed = (eta * mom[name]).contiguous()
        scaled = (scale * a).transpose(-1, -2)  # [B, H, Dk, c]
        # in place into that fresh tensor (mul saves its inputs, not its output, so autograd
        # allows it): out-of-place baddbmm would first copy it, one more pass over the weights
        decayed.flatten(0, 1).baddbmm_(scaled.flatten(0, 1), b.flatten(0, 1))
        out[name] = decayed
    return out
