"""The checks an attention cache passes when a state comes back to a model: its layout
(shapes, dtypes, devices: cheap, at every decode step) and its values (finite keys and
values, the ring positions the stream's position implies: one host sync).

A cache is ``[B, H, S*L, Dh]`` keys and values with int64 positions ``[S*L]``: L ring slots
per source S (MAC's cache has two sources), or every earlier token for full attention.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from ..common.attention import VisibilityRule
from ..layers.attention import EMPTY_POSITION, KVCache
from .registry import MODELS, model_config

Fingerprint = tuple[tuple[str, Any], ...]


def cache_name(block: int, whole: bool) -> str:
    """How an error names block ``block``'s cache: the block's state itself, or its attn."""
    return f"state.blocks[{block}]" + ("" if whole else ".attn")


@lru_cache(maxsize=256)  # a decode step asks at every token; a few models per process
def cache_layout(fingerprint: Fingerprint) -> tuple[int | None, int, int]:
    """(ring slots per source, heads, head width) of the attention caches of the model
    ``fingerprint`` names; slots None for full attention, whose cache holds every token.
    ValueError for a fingerprint no registered architecture made."""
    fields = dict(fingerprint)
    return _cache_capacity(fields), fields["num_heads"], fields["dim"] // fields["num_heads"]


def _cache_capacity(fields: dict[str, Any]) -> int | None:
    """The ring slots per source of the fingerprint's model (None: full attention)."""
    name, window = fields.get("name"), fields.get("window")
    if name not in MODELS:
        raise ValueError(f"state.fingerprint names an unknown model {name!r}")
    rule_of = getattr(MODELS[name][0].block_class, "rule_of", None)
    try:
        config = model_config(name, window=window)
    except (ValueError, TypeError) as err:
        raise ValueError(f"state.fingerprint has window={window!r}: {err}") from err
    # attention-only blocks say their rule; the hybrids attend over a window (MAG, MAL) or a
    # segment (MAC) of config.window tokens, a ring of window - 1 slots either way
    rule = rule_of(config) if rule_of is not None else VisibilityRule(window=config.window)
    return rule.capacity


def check_cache_layout(cache: KVCache, where: str | tuple, want: tuple[int, ...]) -> None:
    """Shapes, dtypes and devices of an attention cache (no tensor values): keys and values
    ``want`` = ``[B, H, S*L, Dh]``, positions int64 ``[S*L]`` (L ring slots per source S, or
    the stream's length for full attention). Cheap on the way through: a decode step runs it
    at every token."""
    keys, values, positions = cache.keys, cache.values, cache.positions
    if (
        isinstance(keys, torch.Tensor)
        and isinstance(values, torch.Tensor)
        and isinstance(positions, torch.Tensor)
        and keys.shape == want
        and values.shape == want
        and positions.shape == want[2:3]
        and positions.dtype == torch.int64
        and keys.is_floating_point()
        and values.is_floating_point()
        and keys.device == values.device == positions.device
    ):
        return
    what = f"{cache_name(*where) if isinstance(where, tuple) else where} (attention cache)"
    for name in ("keys", "values", "positions"):
        tensor = getattr(cache, name)
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{what}: {name} must be a tensor, got {type(tensor).__name__}")
    for name in ("keys", "values"):
        tensor = getattr(cache, name)
        if not tensor.is_floating_point():
            raise ValueError(f"{what}: {name} must be floating point, got {tensor.dtype}")
        if tensor.shape != want:
            raise ValueError(
                f"{what}: {name} must be [B, H, slots, Dh] = {list(want)}, got {list(tensor.shape)}"
            )
    if positions.dtype != torch.int64:
        raise ValueError(
            f"{what}: positions must be int64 (absolute token positions), got {positions.dtype}"
        )
    if positions.shape != want[2:3]:
        raise ValueError(
            f"{what}: positions must be [{want[2]}] (one per slot), got {list(positions.shape)}"
        )
    devices = {keys.device, values.device, positions.device}
    raise ValueError(f"{what}: keys, values and positions are on several devices {devices}")


def expected_positions(position: int, capacity: int | None, sources: int, device) -> torch.Tensor:
    """The positions a cache holds at ``position``: every earlier token (full attention),
    or per source a ring whose slot j holds the latest position p < ``position`` with
    p mod L = j (EMPTY_POSITION while there is none)."""
    if capacity is None:
        return torch.arange(position, device=device).repeat(sources)
    slot = torch.arange(capacity, device=device)
    latest = position - 1 - torch.remainder(position - 1 - slot, max(capacity, 1))
    empty = torch.full_like(latest, EMPTY_POSITION)
    return torch.where(latest >= 0, latest, empty).repeat(sources)


def check_cache_values(
    caches: list[tuple[str, KVCache, int]], position: int, capacity: int | None
) -> None:
    """Finite keys and values, and the positions ``position`` implies, in every cache: one
    host sync (a second, on failure only, to say which)."""
    flags, faults = [], []
    for where, cache, sources in caches:
        what = f"{where} (attention cache)"
        for name in ("keys", "values"):
            flags.append(~torch.isfinite(getattr(cache, name)).all())
            faults.append(lambda what=what, name=name: f"{what}: {name} contain NaN or inf")
        want = expected_positions(position, capacity, sources, cache.positions.device)
        flags.append((cache.positions != want).any())
        faults.append(lambda what=what, cache=cache: _positions_fault(what, cache, position))
    if not flags:
        return
    bad = torch.stack([flag.to(flags[0].device) for flag in flags])
    if bool(bad.any()):
        raise ValueError(faults[int(bad.nonzero()[0, 0])]())


def _positions_fault(what: str, cache: KVCache, position: int) -> str:
    """Why a cache's positions are not the ones ``position`` implies."""
    held = cache.positions[cache.positions != EMPTY_POSITION]
    if held.numel() and int(held.min()) < 0:
        return (
            f"{what}: positions hold {int(held.min())}: a position is >= 0, or "
            f"EMPTY_POSITION ({EMPTY_POSITION}) for an empty slot"
        )
    if held.numel() and int(held.max()) >= position:
        return (
            f"{what}: positions hold {int(held.max())}, past state.position={position} "
            "(a cache holds only earlier tokens): the state was edited"
        )
    return (
        f"{what}: positions do not match state.position={position} (slot j of a ring of L "
        "slots holds the latest earlier position p with p mod L = j): the state was edited"
    )
