"""The memory recurrence one token at a time in MLX: literally the equations of
docs/memory.md (mirrors ``titans_atlas.ops.scan_reference``).

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, C chunk size, c Omega window.
The oracle of the MLX chunked form and the decoding path. One token's update is a function of
arrays only (the chunk-boundary choices are made by the loop), so it can be ``mx.compile``d.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from ...common.options import ScanInputs
from .clipping import clip_factors
from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5_reference
from .state import MemoryState, last_tokens

# The update rule as the MLX steps name it: None (momentum), "token" or "chunk" (Muon).
MUON_MODES = {"momentum": None, "muon": "token", "muon_chunk": "chunk"}


def _token_step(
    memory: MemoryModel, muon: str | None, read: str, max_grad_norm: float | None
) -> Callable:
    """``step(base, weights, mom, taps_k, taps_v, gamma, theta, eta, alpha, ns_step, q, anchor)``:
    taps ``[B, H, c, D]``, gamma ``[B, H, c]``, gates ``[B, H, 1, 1]``, ``ns_step`` 1.0 where
    a Muon step is taken at this token (0.0 otherwise), q ``[B, H, 1, Dk]``, ``anchor`` the
    decay target A (an empty dict: decay toward zero). Each tap's gradient is clipped to
    ``max_grad_norm`` before its gate (section 9)."""

    def step(base, weights, mom, taps_k, taps_v, gamma, theta, eta, alpha, ns_step, q, anchor):
        factors = clip_factors(memory.grad_factors(base, taps_k, taps_v), max_grad_norm)
        grads = {  # G = sum_j gamma_j a_j^T b_j: [B, H, d_in, d_out]
            name: mx.swapaxes(gamma[..., None] * a, -1, -2) @ b for name, (a, b) in factors.items()
        }
        previous = weights
        if muon is None:  # Titans eq. 13-14
            mom = {n: eta * mom[n] - theta * grads[n] for n in grads}
            weights = {n: (1 - alpha) * weights[n] + mom[n] for n in grads}
        else:  # ATLAS Muon; per-chunk Muon steps only at the token that closes a chunk
            mom = {n: eta * mom[n] + grads[n] for n in grads}
            weights = {
                n: (1 - alpha) * weights[n] - ns_step * theta * newton_schulz5_reference(mom[n])
                for n in grads
            }
        if anchor:  # the decay pulls toward A instead of zero (section 10)
            weights = {n: w + alpha * anchor[n] for n, w in weights.items()}
        read_weights = weights if read == "after" else previous
        return memory.read(read_weights, q), weights, mom

    return step


_STEPS: dict[tuple, Callable] = {}


def token_step(
    memory: MemoryModel,
    muon: str | None,
    read: str,
    compiled: bool,
    max_grad_norm: float | None = None,
) -> Callable:
    """The (cached, optionally compiled) one-token update."""
    key = (memory, muon is not None, read, compiled, max_grad_norm)
    if key not in _STEPS:
        step = _token_step(memory, muon, read, max_grad_norm)
        _STEPS[key] = mx.compile(step) if compiled else step
    return _STEPS[key]


def memory_scan_reference(
    inputs: ScanInputs, *, compiled: bool = False
) -> tuple[mx.array, MemoryState]:
    """Per-token loop; same arguments and result as ``memory_scan_chunk``."""
    memory, q, k, v, gates, state, options = inputs
    muon = MUON_MODES[options.update_rule]
    length, size, window = q.shape[1], options.chunk_size, options.omega_window
    q, k, v = (mx.swapaxes(x, 1, 2) for x in (q, k, v))  # [B, H, T, D]
    lr, omega_gate = gates.lr, gates.omega
    if omega_gate is None:
        omega_gate = mx.ones((*lr.shape, 1), dtype=lr.dtype)
    keys = mx.concatenate([state.halo_keys, k], axis=2)  # [B, H, c-1+T, Dk]
    values = mx.concatenate([state.halo_values, v], axis=2)
    step = token_step(memory, muon, options.read, compiled, options.max_grad_norm)
    anchor = gates.decay_to or {}
    per_token = (lr, gates.momentum, gates.decay)
    per_token = [mx.swapaxes(g, 1, 2)[..., None, None] for g in per_token]  # [B, H, T, 1, 1]

    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    outputs = []
    for r in range(length):
        t = state.position + r
        if t % size == 0:
            base = weights  # the base weights of a chunk are the weights at the end of the last
        # Omega window: tap j looks at token t - j (taps before the stream start are dropped)
        taps_k = keys[:, :, r : r + window][:, :, ::-1]  # [B, H, c, Dk]
        taps_v = values[:, :, r : r + window][:, :, ::-1]
        exists = mx.array([float(t - j >= 0) for j in range(window)], dtype=omega_gate.dtype)
        gamma = omega_gate[:, r] * exists  # [B, H, c]
        theta, eta, alpha = (g[:, :, r] for g in per_token)  # [B, H, 1, 1]
        ns_step = mx.array(float(muon == "token" or t % size == size - 1), dtype=theta.dtype)
        y, weights, mom = step(
            base,
            weights,
            mom,
            taps_k,
            taps_v,
            gamma,
            theta,
            eta,
            alpha,
            ns_step,
            q[:, :, r : r + 1],
            anchor,
        )
        outputs.append(y)
    halos = (last_tokens(state.halo_keys, k, window), last_tokens(state.halo_values, v, window))
    new_state = state.advanced(length, weights, mom, base, halos, options)
    y = mx.concatenate(outputs, axis=2) if outputs else mx.zeros(v.shape, dtype=v.dtype)
    return mx.swapaxes(y, 1, 2), new_state
