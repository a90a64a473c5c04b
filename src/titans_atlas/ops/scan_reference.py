"""The memory recurrence one token at a time: literally the equations of docs/memory.md (section 2).

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, C chunk size, c Omega window.
This is the oracle every fast form is tested against, and a decoding path: it holds the
weights of the current token only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange

from .clipping import clip_factors
from .newton_schulz import newton_schulz5_reference
from .options import ScanInputs, ScanOptions
from .state import MemoryState, TensorDict, last_tokens


def memory_scan_reference(inputs: ScanInputs) -> tuple[torch.Tensor, MemoryState]:
    """Per-token loop; same arguments and result as ``memory_scan_chunk`` (inputs checked,
    in the compute dtype, halo prepared). ``options.checkpoint`` has no effect here."""
    return per_token_loop(inputs, _reference_step)


# (options, t, weights, mom, factors, gamma [B, H, c], theta, eta, alpha [B, H, 1, 1], A)
# -> (W_t, S_t): one token's update from its clipped tap factors and gates
TokenStep = Callable[..., tuple[TensorDict, TensorDict]]


def per_token_loop(inputs: ScanInputs, step: TokenStep) -> tuple[torch.Tensor, MemoryState]:
    """The recurrence token by token, each token's update made by ``step``: the reference's
    (below) or the fused one of ``scan_token.py``, which share this loop."""
    memory, q, k, v, gates, state, options = inputs
    length, size, window = q.shape[1], options.chunk_size, options.omega_window
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    omega = gates.omega if gates.omega is not None else gates.lr.new_ones(*gates.lr.shape, 1)
    keys = torch.cat([state.halo_keys, k], dim=2)  # [B, H, c-1+T, Dk]
    values = torch.cat([state.halo_values, v], dim=2)  # [B, H, c-1+T, Dv]

    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    outputs = []
    for r in range(length):
        t = state.position + r
        if t % size == 0:
            base = weights  # a chunk's base weights are the weights the previous chunk left
        # Omega window: tap j looks at token t - j; taps before the stream start are dropped
        taps_k = keys[:, :, r : r + window].flip(2)  # [B, H, c, Dk]
        taps_v = values[:, :, r : r + window].flip(2)  # [B, H, c, Dv]
        exists = (t - torch.arange(window, device=q.device)) >= 0
        gamma = omega[:, r] * exists  # [B, H, c]
        # each tap's gradient clipped on its own (section 9), then gated
        factors = clip_factors(memory.grad_factors(base, taps_k, taps_v), options.max_grad_norm)
        token_gates = (gates.lr, gates.momentum, gates.decay)
        theta, eta, alpha = (g[:, r, :, None, None] for g in token_gates)  # [B, H, 1, 1]
        previous = weights
        weights, mom = step(
            options, t, weights, mom, factors, gamma, theta, eta, alpha, gates.decay_to
        )
        read_weights = weights if options.read == "after" else previous
        outputs.append(memory.read(read_weights, q[:, :, r : r + 1]))
    halos = (last_tokens(state.halo_keys, k, window), last_tokens(state.halo_values, v, window))
    new_state = state.advanced(length, weights, mom, base, halos, options)
    y = torch.cat(outputs, dim=2) if outputs else q.new_zeros(*v.shape)
    return rearrange(y, "b h t d -> b t h d"), new_state


def _reference_step(options, t, weights, mom, factors, gamma, theta, eta, alpha, target):
    """G_t = sum_j gamma_j a_j^T b_j, then the update rule, then the pull toward A."""
    grads = {
        name: torch.einsum("bhj,bhjd,bhje->bhde", gamma, a, b) for name, (a, b) in factors.items()
    }
    weights, mom = _token_update(
        options, t, weights=weights, mom=mom, grads=grads, theta=theta, eta=eta, alpha=alpha
    )
    if target is not None:  # the decay pulls toward A instead of zero (section 10)
        weights = {n: w + alpha * target[n] for n, w in weights.items()}
    return weights, mom


def _token_update(
    options: ScanOptions,
    t: int,
    *,
    weights: TensorDict,
    mom: TensorDict,
    grads: TensorDict,
    theta: torch.Tensor,
    eta: torch.Tensor,
    alpha: torch.Tensor,
) -> tuple[TensorDict, TensorDict]:
    """(W_t, S_t) from (W_{t-1}, S_{t-1}) and G_t by the update rule; gates ``[B, H, 1, 1]``."""
    if options.update_rule == "momentum":  # Titans eqs. 13-14
        mom = {n: eta * mom[n] - theta * grads[n] for n in grads}
        return {n: (1 - alpha) * weights[n] + mom[n] for n in grads}, mom
    # ATLAS Muon; the per-chunk rule steps only at the token that closes a chunk
    mom = {n: eta * mom[n] + grads[n] for n in grads}
    steps = muon_steps_at(options, t)
    weights = {
        n: (1 - alpha) * weights[n] - (theta * newton_schulz5_reference(mom[n]) if steps else 0)
        for n in grads
    }
    return weights, mom


def muon_steps_at(options: ScanOptions, t: int) -> bool:
    """Whether a Muon rule moves the weights at token t: every token ("muon"), or the token
    that closes a chunk ("muon_chunk")."""
    return options.update_rule == "muon" or t % options.chunk_size == options.chunk_size - 1
