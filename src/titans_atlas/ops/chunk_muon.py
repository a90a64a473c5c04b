"""One chunk of the Muon rules ("muon", "muon_chunk") in the chunked scan (docs/memory.md, 7).

Axes: B batch, H heads, C chunk size, U key columns, M materialised momenta (C or 1), G weights
that share one shape, m x n a weight in its wide orientation (m = min(d_in, d_out) rows).

Symbols: S_m = e_m S0 + sum_u (E Gamma)[m, u] g_u and W_i = beta_i W0 - sum_m P[i, m] NS5(S_m)
(``MuonCoefficients``). Each weight is handled in its wide orientation, where NS5 works, so
tall weights (d_in > d_out) never pass a transposed copy of their momenta around: the rank-1
factors swap roles and reads multiply by the transposed wide matrix. Weights of one wide shape
(both matrices of the residual MLP, all three of the gated one) are stacked on a leading axis,
so their momenta come out of one matmul and go through one batched NS5.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from .clipping import clip_factors
from .coefficients import Chunk, MuonCoefficients
from .memory_models import MemoryModel
from .newton_schulz import newton_schulz5
from .state import TensorDict


def _wide_groups(factors) -> dict[tuple[int, int], list[str]]:
    """Weight names grouped by their wide shape (m, n), in the model's order."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, (a, b) in factors.items():
        groups.setdefault(tuple(sorted((a.shape[-1], b.shape[-1]))), []).append(name)
    return groups


def _momenta(coef: MuonCoefficients, factors, momentum: TensorDict, names: list[str]):
    """The M momenta of the weights ``names`` (one wide shape), stacked: ``[G, B, H, M, m, n]``."""
    left, right, start = [], [], []
    for name in names:
        a, b = factors[name]
        tall = a.shape[-1] > b.shape[-1]
        left.append(b if tall else a)  # [B, H, U, m]
        right.append(a if tall else b)  # [B, H, U, n]
        start.append(momentum[name].transpose(-1, -2) if tall else momentum[name])
    left, right, start = (torch.stack(x) for x in (left, right, start))
    # sum_u (E Gamma)[m, u] left_u^T right_u for every m: one matmul over (m, r) x u
    weighted = rearrange(
        coef.rows_grad[..., None] * left[:, :, :, None], "g b h m u r -> g b h (m r) u"
    )
    rows = rearrange(weighted @ right, "g b h (m r) n -> g b h m r n", r=left.shape[-1])
    # + e_m S0, in place on the fresh matmul output (which autograd does not keep)
    return rows.addcmul_(coef.rows_carry[..., None, None], start.unsqueeze(3))


def _orthogonal_momenta(coef, factors, momentum, names, newton_schulz, save_iterates: bool):
    """NS5 of the momenta of the weights ``names`` ``[G, B, H, M, m, n]``, and their last
    row, the chunk's end momentum ``[G, B, H, m, n]``."""
    rows = _momenta(coef, factors, momentum, names)
    return newton_schulz(rows, save_iterates=save_iterates), rows[:, :, :, -1]


def muon_chunk_step(
    memory: MemoryModel,
    chunk: Chunk,
    *,
    checkpointed: bool = False,
    max_grad_norm: float | None = None,
    newton_schulz: Callable[..., torch.Tensor] = newton_schulz5,
):
    """One ``Chunk`` (``MuonCoefficients``): gradients at its ``base`` (clipped to
    ``max_grad_norm`` per token and weight before they enter the momenta), from its start
    (``weights``, ``momentum``) = (W0, S0), with its decay target ``anchor`` A or None.
    Returns (y ``[B, H, C, Dv]``, W_end, S_end). Materialises this chunk's M momenta of each
    weight, ``[B, H, M, m, n]``. ``checkpointed``: the step runs under activation
    checkpointing, so NS5 may keep its iterates (only the recompute's are kept, one chunk at
    a time) instead of recomputing. ``newton_schulz``: the NS5 implementation (the torch
    form, or the fused Triton kernel of ``impl="triton"``)."""
    coef, base, weights, momentum, q, k, v, anchor = chunk
    factors = clip_factors(memory.grad_factors(base, k, v), max_grad_norm)
    tall = {name: a.shape[-1] > b.shape[-1] for name, (a, b) in factors.items()}
    # Outside chunk checkpointing, the momenta are rebuilt in backward from the rank-1 factors
    # (one matmul) rather than kept: NS5's backward needs its input, and keeping it would cost
    # one weight-sized tensor per token (docs/benchmarks.md). NS5 then keeps the iterates of
    # that recompute, so it still runs forward twice in all, as without this.
    rebuild = not checkpointed and torch.is_grad_enabled()
    orthogonal, new_momentum = {}, {}
    for names in _wide_groups(factors).values():
        args = (coef, factors, momentum, names, newton_schulz)
        if rebuild:
            ortho, last_rows = activation_checkpoint(
                _orthogonal_momenta, *args, True, use_reentrant=False, preserve_rng_state=False
            )
        else:
            ortho, last_rows = _orthogonal_momenta(*args, checkpointed)
        for name, wide, last in zip(names, ortho, last_rows):
            orthogonal[name] = wide  # contiguous: the group axis leads
            last = last.transpose(-1, -2) if tall[name] else last
            new_momentum[name] = last.clone(memory_format=torch.contiguous_format)  # not a view

    def linear(name: str, x: torch.Tensor) -> torch.Tensor:
        wide = orthogonal[name]
        # x_i NS5(S_m) for every row i and momentum m: [B, H, M, C, d_out]
        through = x.unsqueeze(2) @ (wide.transpose(-1, -2) if tall[name] else wide)
        update = torch.einsum("bhim,bhmie->bhie", coef.read_update, through)
        out = coef.read_keep[..., None] * (x @ weights[name]) - update
        if anchor is not None:  # + (1 - beta_i) x_i A (docs/memory.md, section 10)
            out = out + coef.read_anchor[..., None] * (x @ anchor[name])
        return out

    y = memory.forward_with(linear, q)
    new_weights = {}
    for name in factors:
        step = torch.einsum("bhm,bhmrc->bhrc", coef.end_update, orthogonal[name])
        step = step.transpose(-1, -2) if tall[name] else step
        new_weights[name] = coef.end_keep[..., None, None] * weights[name] - step
        if anchor is not None:
            new_weights[name] = new_weights[name] + coef.end_anchor[..., None, None] * anchor[name]
    return y, new_weights, {name: new_momentum[name] for name in factors}  # the weights' order
