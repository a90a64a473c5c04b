"""What a memory scan takes besides q, k, v and the state: its gates and its options, bundled
-- once for both backends (``ops/options.py`` re-exports them for torch, the MLX scan takes
the same bundles).

Axes: B batch, T tokens, H heads, c Omega window. Symbols as in docs/memory.md ("Symbols").

The allowed values of every option live here, once. Every form of the scan of each backend
(``memory_scan_reference``, ``memory_scan_chunk``, torch's ``memory_scan_triton``) takes one
``ScanInputs``: the memory, q, k, v, the state and these two bundles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..validation import check_choice, check_int, check_number

Array = Any  # a torch.Tensor or an mlx.core.array

# The update rules of the recurrence (docs/memory.md, sections 2 and 7).
UPDATE_RULES = ("momentum", "muon", "muon_chunk")
READ_MODES = ("after", "before")
# The older ``muon=`` spelling of the rule (still a keyword of ``memory_scan``).
MUON_VALUES = (False, True, "token", "chunk")
_RULE_OF_MUON = (("momentum", False), ("muon", True), ("muon", "token"), ("muon_chunk", "chunk"))


def update_rule_from_muon(muon: Any) -> str:
    """``muon=False`` -> "momentum", ``True`` or "token" -> "muon", "chunk" -> "muon_chunk"."""
    check_choice("muon", muon, MUON_VALUES)
    return next(rule for rule, value in _RULE_OF_MUON if value is muon or value == muon)


def scan_update_rule(muon: Any, update_rule: str | None) -> str:
    """``memory_scan``'s rule from either spelling: ``update_rule`` by name, else the older
    ``muon=`` (ValueError when both are given)."""
    if update_rule is None:
        return update_rule_from_muon(muon)
    if muon is not False:
        raise ValueError(f"give muon={muon!r} or update_rule={update_rule!r}, not both")
    return update_rule


# A chunked call costs about one full chunk however few tokens it holds, the per-token loop
# about T tokens; the loop wins up to roughly C / 16 tokens (benchmarks/memory_scan.py, "auto").
AUTO_TOKENS_PER_CHUNK = 16


def auto_impl(impl: str, length: int, chunk_size: int, loop: str = "reference") -> str:
    """``impl="auto"`` -> ``loop`` (a per-token form: torch's fused "token", MLX's
    "reference") for calls of at most max(1, C // 16) tokens, e.g. decoding, else "chunk";
    any other ``impl`` as it is."""
    if impl != "auto":
        return impl
    return loop if length <= max(1, chunk_size // AUTO_TOKENS_PER_CHUNK) else "chunk"


@dataclass(frozen=True)
class ScanOptions:
    """How the recurrence runs (validated on construction; ValueError names the field).

    Attributes:
        chunk_size: C, tokens per gradient base point (C = 1: the fully sequential rule).
        omega_window: c, ATLAS Omega window (c = 1: plain Titans).
        update_rule: one of ``UPDATE_RULES``: "momentum" (Titans eqs. 13-14), "muon" (ATLAS
            per-token Muon), "muon_chunk" (one NS5 step per chunk, a different model).
        read: one of ``READ_MODES``: "after" (y_t = f(W_t, q_t)) or "before" (f(W_{t-1}, q_t)).
        checkpoint: recompute each chunk in backward (the chunked form only).
        max_grad_norm: g_max > 0, clip every token's inner gradient of every weight (every
            Omega tap) to this Frobenius norm before the gates and momentum see it; None
            (the default) runs the spec's unclipped recurrence (docs/memory.md, section 9).
    """

    chunk_size: int = 64
    omega_window: int = 1
    update_rule: str = "momentum"
    read: str = "after"
    checkpoint: bool = False
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        check_int("chunk_size", self.chunk_size, 1)
        check_int("omega_window", self.omega_window, 1)
        check_choice("update_rule", self.update_rule, UPDATE_RULES)
        check_choice("read", self.read, READ_MODES)
        check_choice("checkpoint", self.checkpoint, (False, True))
        if self.max_grad_norm is not None:
            check_number("max_grad_norm", self.max_grad_norm, 0.0)

    @property
    def uses_muon(self) -> bool:
        return self.update_rule != "momentum"


@dataclass(frozen=True)
class MemoryGates:
    """The per-token gates of the recurrence, as the layer computes them from the input.

    Attributes:
        lr: theta_t >= 0, the inner learning rate ``[B, T, H]``.
        momentum: eta_t in [0, 1], the momentum gate ``[B, T, H]`` (not the momentum S_t).
        decay: alpha_t in [0, 1], forgetting; the weights keep (1 - alpha_t) ``[B, T, H]``.
        omega: gamma_{t,j} in [0, 1], the Omega gate of window tap j ``[B, T, H, c]``; None
            means a window of one with gamma = 1.
        decay_to: the weights A that alpha_t decays toward, name -> ``[B, H, d_in, d_out]``
            (W_t = (1 - alpha_t) W_{t-1} + alpha_t A + ...; docs/memory.md, section 10);
            None decays toward zero (the spec).
    """

    lr: Array
    momentum: Array
    decay: Array
    omega: Array | None = None
    decay_to: dict[str, Array] | None = None

    def map(self, fn: Callable[[Array], Array]) -> MemoryGates:
        """The same gates with ``fn`` applied to every array (None stays None)."""
        cast = lambda g: None if g is None else fn(g)  # noqa: E731
        target = None if self.decay_to is None else {n: cast(w) for n, w in self.decay_to.items()}
        gates = (self.lr, self.momentum, self.decay, self.omega)
        return MemoryGates(*(cast(g) for g in gates), decay_to=target)

    def to(self, dtype: Any) -> MemoryGates:
        """torch: every gate cast to ``dtype``."""
        return self.map(lambda g: g.to(dtype))


class ScanInputs(NamedTuple):
    """What every form of the scan takes, as ``memory_scan`` hands it over: checked, in the
    compute dtype, the state prepared (chunk grid, Omega halo). ``memory`` and ``state`` are
    the backend's ``MemoryModel`` and ``MemoryState``."""

    memory: Any
    q: Array  # [B, T, H, Dk]
    k: Array  # [B, T, H, Dk]
    v: Array  # [B, T, H, Dv]
    gates: MemoryGates
    state: Any
    options: ScanOptions
