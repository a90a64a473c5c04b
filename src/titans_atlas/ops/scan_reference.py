"""The memory recurrence one token at a time: literally the equations of spec/memory.md.

Axes: B batch, T tokens, H heads, Dk/Dv key/value width, C chunk size, c Omega window.
This is the oracle every fast form is tested against, and a decoding path: it holds the
weights of the current token only.
"""

from __future__ import annotations

import torch
from einops import rearrange

from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5_reference
from .state import MemoryState, last_tokens


def memory_scan_reference(
    memory: MemoryModel,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    momentum: torch.Tensor,
    decay: torch.Tensor,
    state: MemoryState,
    chunk_size: int,
    omega_window: int,
    omega_gate: torch.Tensor | None,
    muon: str | None,
    read: str,
    checkpoint: bool = False,
) -> tuple[torch.Tensor, MemoryState]:
    """Per-token loop; same arguments and result as ``memory_scan_chunk``.
    (``checkpoint`` is accepted for a shared signature and has no effect here.)"""
    length, size, window = q.shape[1], chunk_size, omega_window
    q, k, v = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))
    if omega_gate is None:
        omega_gate = lr.new_ones(*lr.shape, 1)
    keys = torch.cat([state.halo_keys, k], dim=2)  # [B, H, c-1+T, Dk], halo prepared by the caller
    values = torch.cat([state.halo_values, v], dim=2)

    weights, mom, base = state.weights, state.momentum, state.chunk_base()
    outputs = []
    for r in range(length):
        t = state.position + r
        if t % size == 0:
            base = weights  # the base weights of a chunk are the weights at the end of the last
        # Omega window: tap j looks at token t - j (taps before the stream start are dropped)
        taps_k = keys[:, :, r : r + window].flip(2)  # [B, H, c, Dk]
        taps_v = values[:, :, r : r + window].flip(2)
        exists = (t - torch.arange(window, device=q.device)) >= 0
        gamma = omega_gate[:, r] * exists  # [B, H, c]
        grads = {
            name: torch.einsum("bhj,bhjd,bhje->bhde", gamma, a, b)
            for name, (a, b) in memory.grad_factors(base, taps_k, taps_v).items()
        }
        theta, eta, alpha = (g[:, r, :, None, None] for g in (lr, momentum, decay))
        previous = weights
        if muon is None:  # Titans eq. 13-14
            mom = {n: eta * mom[n] - theta * grads[n] for n in grads}
            weights = {n: (1 - alpha) * weights[n] + mom[n] for n in grads}
        else:  # ATLAS Muon; per-chunk Muon steps only at the token that closes a chunk
            mom = {n: eta * mom[n] + grads[n] for n in grads}
            steps = muon == "token" or t % size == size - 1
            weights = {
                n: (1 - alpha) * weights[n]
                - (theta * newton_schulz5_reference(mom[n]) if steps else 0)
                for n in grads
            }
        read_weights = weights if read == "after" else previous
        outputs.append(memory.forward(read_weights, q[:, :, r : r + 1]))
    end = state.position + length
    new_state = MemoryState(
        weights=weights,
        momentum=mom,
        base=base if end % size else None,
        position=end,
        halo_keys=last_tokens(state.halo_keys, k, window),
        halo_values=last_tokens(state.halo_values, v, window),
        chunk_size=size,
        omega_window=window,
    )
    y = torch.cat(outputs, dim=2) if outputs else q.new_zeros(*v.shape)
    return rearrange(y, "b h t d -> b t h d"), new_state
