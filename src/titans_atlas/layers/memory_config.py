"""``MemoryConfig``: the settings of one memory layer (docs/architectures.md, "The memory
layer"; the stability fields: docs/memory.md, sections 9 and 10)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..common.memory_models import output_init_scale
from ..ops import READ_MODES, UPDATE_RULES
from ..validation import check_bool, check_choice, check_int, check_number

# The layer's own choices; the scan's (update rules, read modes, implementations) live in ops.
MEMORY_MODELS = ("linear", "mlp", "gated_mlp")
FEATURE_MAPS = (None, "polynomial")
DECAY_TARGETS = ("zero", "init")  # what alpha decays the memory toward
# Which token an Omega gate gamma_{t,j} is computed from: "step" x_t (every tap's gate from the
# token closing the window), "tap" x_{t-j} (each tap's gate from the token it weights).
OMEGA_GATE_SOURCES = ("step", "tap")
# How the untrained layer's query, key and value paths start (docs/architectures.md,
# "Initialisation"): "shifted" -- the query projection a copy of the key projection, and the
# short convolutions as delays: the key reads the previous token, the query and value the
# current one (H3's shifted keys), so an untrained memory already stores "previous token ->
# this token" and a query finds the value that followed its token; "matched" -- the same
# copy, convolutions with non-negative random taps and no bias; "independent" -- separate
# random draws and PyTorch's default convolution init (the layer before 2026-12).
QK_INITS = ("matched", "shifted", "independent")
# "shifted": each stream's convolution starts as a delay of this many tokens (both backends)
SHIFTED_CONV_LAGS = {"q": 0, "k": 1, "v": 0}
# The values of the stability fields that give the spec's unbounded layer: what a config
# saved before they existed (checkpoint format 2) meant.
UNBOUNDED_GATES = {
    "momentum_max": 1.0,
    "decay_min": 0.0,
    "max_grad_norm": None,
    "decay_target": "zero",
}

# Fields added after the stability fields, with the value that gives the layer a config saved
# before each existed (checkpoint format 3 and older, HF folders without them).
LATER_FIELDS = {"omega_gate_source": "step"}
# Fields added in checkpoint format 7, with the value that gives the layer saved before them.
FORMAT_7_FIELDS = {"timescale_ratio": 1.0}
# Fields added in checkpoint format 8 (None: theta shares alpha's timescales, as in format 7).
FORMAT_8_FIELDS = {"timescale_lr_ratio": None}
# Fields that only choose how ``init_weights`` draws the parameters: a saved layer's weights
# already carry their effect, so a config saved without them loads (with the default, or
# with ``INIT_ONLY_BEFORE``'s value where the default has changed since).
INIT_ONLY_FIELDS = ("qk_init", "output_init")
# The gates' starting values: they only set the gate biases ``init_weights`` draws, which a
# saved layer's weights carry (a checkpoint's may differ from today's preset).
GATE_INIT_FIELDS = ("init_lr", "init_momentum", "init_decay", "init_omega")
# A config saved before ``output_init`` existed was drawn at LeCun's scale, which the default
# no longer is: such files load with the value they were drawn with.
INIT_ONLY_BEFORE = {"output_init": 1.0}


def upgrade_saved_memory(memory: dict) -> dict:
    """A complete MemoryConfig dict saved before some fields existed -- every field present
    but ``UNBOUNDED_GATES`` (all or none of them), ``LATER_FIELDS``, ``FORMAT_7_FIELDS`` and
    ``FORMAT_8_FIELDS`` and ``output_init`` (``INIT_ONLY_BEFORE``) -- with the values
    that reproduce the layer it was saved from (for saved configs without a format version,
    e.g. Hugging Face folders); any other dict unchanged (a partial dict takes today's
    defaults)."""
    others = (
        set(MemoryConfig.__dataclass_fields__)
        - set(UNBOUNDED_GATES)
        - set(LATER_FIELDS)
        - set(FORMAT_7_FIELDS)
        - set(FORMAT_8_FIELDS)
        - set(INIT_ONLY_FIELDS)
    )
    if not others <= set(memory):
        return memory
    if not set(UNBOUNDED_GATES) & set(memory):
        memory = {**memory, **UNBOUNDED_GATES}
    return {**LATER_FIELDS, **FORMAT_7_FIELDS, **FORMAT_8_FIELDS, **INIT_ONLY_BEFORE, **memory}


@dataclass
class MemoryConfig:
    """Settings of one memory layer: the architecture only (how the scan runs -- implementation,
    activation checkpointing -- is chosen at run time with ``NeuralMemory.set_runtime``).
    ``init_*`` are the gates of an untrained layer.

    ``update_rule``: "momentum" (Titans), "muon" (ATLAS: NS5 of the momentum at every token) or
    "muon_chunk" (one NS5 step per chunk, a different model; docs/memory.md).

    Stability (docs/memory.md, section 9): every token's inner gradient is clipped to
    ``max_grad_norm`` per weight, and the gates are bounded -- theta = lr_max sigmoid(.),
    eta = momentum_max sigmoid(.), alpha = decay_min + (1 - decay_min) sigmoid(.) -- which
    bounds the memory for any input and any learned parameters:
    |W| <= max(|W_init|, lr_max max_grad_norm Gamma / ((1 - momentum_max) decay_min)).
    ``max_grad_norm=None``, ``momentum_max=1`` and ``decay_min=0`` give the spec's unbounded
    layer (and the function of checkpoints saved before these fields, format version 2).
    ``decay_target``: "zero" (the spec) or "init": the decay pulls the weights toward the
    learned initial weights, so a long stream never erases them (section 10).

    ``omega_gate_source`` (Omega window only): "step" computes all c gates of step t from x_t;
    "tap" computes gamma_{t,j} from x_{t-j}, the token that tap weights, so a token decides
    its own weight at every age in the window (docs/architectures.md, "Omega gates").

    ``qk_init`` ("shifted" | "matched" | "independent") chooses how the query, key and value
    paths are drawn (``QK_INITS``). With "shifted" every seed binds on the recall task, where
    "independent" stuck in about one seed of three (docs/results.md, "Binding in every
    seed").
    ``output_init`` (a number >= 0, default 0.5; "lecun" stands for 1, "zero" for 0) is the
    std of the MLP and gated memories' last weight as a multiple of LeCun's: 1 draws it like
    the others, 0 starts it at zero, so that the untrained memory reads 0 (a residual one its
    key), as the linear memory always does; the linear memory ignores it. Half LeCun's scale
    lifts MQAR where 1 learned slowest and keeps the recall task's hold at 16x the length,
    which 0 lost (docs/architectures.md, "Initialisation").
    ``timescale_ratio`` (1: off) gives the heads a spread of timescales, as Mamba's and
    RetNet's per-channel decays do: head h's theta and alpha are scaled by
    ``timescale_ratio ** (-h / (H - 1))``, so head 0 keeps the bounds above and the last head
    writes and forgets ``timescale_ratio`` times slower (``head_scales``). Trained, every head
    otherwise picks a fast decay (0.01-0.4 per token on books: a horizon of a few to a hundred
    bytes); the slow heads hold what the text said thousands of tokens back
    (docs/results.md, "Language modelling past the window"). By default theta and alpha share
    the scale, so the stability bound above holds unchanged.
    ``timescale_lr_ratio`` (None: ``timescale_ratio``) spreads theta on its own, between 1
    and ``timescale_ratio``: head h's theta is scaled by ``timescale_lr_ratio ** (-h / (H -
    1))`` while alpha keeps the full spread, so with 1024 and 32 the slowest head forgets
    1024x and writes 32x slower than head 0. The per-chunk step can only shrink; the weight
    bound of docs/memory.md, section 9 (proportional to theta_max / alpha_min), loosens on
    head h by the ratio of its two factors, at most ``timescale_ratio / timescale_lr_ratio``.
    ``momentum_max=0`` removes the momentum (eta = 0; then ``init_momentum`` must be 0): the
    delta rule family, e.g. the registered ``gdn`` model.
    """

    model: str = "mlp"  # "linear" | "mlp" | "gated_mlp"
    expansion: float = 4.0
    depth: int = 2
    activation: str = "gelu"
    residual: bool = False
    chunk_size: int = 64
    omega_window: int = 1
    update_rule: str = "momentum"  # "momentum" | "muon" | "muon_chunk"
    feature_map: str | None = None  # None | "polynomial"
    poly_degree: int = 2
    feature_projection: bool = False  # learned projection of phi(k) back to the head width
    read: str = "after"
    # theta = lr_max * sigmoid(.): up to a 10% step per token (0.02 before 2026-12 bound
    # too slowly: docs/results.md, "Binding in every seed")
    lr_max: float = 0.1
    momentum_max: float = 0.9  # eta = momentum_max * sigmoid(.): amplification <= 10
    decay_min: float = 1e-3  # alpha = decay_min + (1 - decay_min) * sigmoid(.)
    max_grad_norm: float | None = 1.0  # per-token inner gradient clip (None: unclipped)
    decay_target: str = "zero"  # "zero" | "init": what alpha decays the weights toward
    init_lr: float = 0.02
    init_momentum: float = 0.5
    init_decay: float = 0.003  # keeps ~99.7% per token: a half-life of ~230 tokens
    init_omega: float | None = None  # None: 1 / omega_window, so the window's gates sum to ~1
    omega_gate_source: str = "step"  # "step" | "tap": the token gamma_{t,j} is computed from
    timescale_ratio: float = 1.0  # slowest head's theta and alpha / the first head's (1: off)
    timescale_lr_ratio: float | None = None  # theta's own spread, 1..timescale_ratio (None: same)
    conv_kernel: int = 2  # 4 before 2026-12: wider taps smear the key over 4 tokens
    qk_init: str = "shifted"  # "shifted" | "matched" | "independent": see QK_INITS
    # an MLP memory's last weight's std / LeCun's ("lecun" = 1, "zero" = 0): at 1 the untrained
    # read outweighs a first write 3:1, at 0 long streams decay the memory into the zero
    # point it cannot write from (docs/architectures.md, "Initialisation"); 1 before 2026-12-07
    output_init: float = 0.5
    output_gate: str = "sigmoid"  # "sigmoid" | "silu"

    def __post_init__(self) -> None:
        check_choice("model", self.model, MEMORY_MODELS)
        check_choice("feature_map", self.feature_map, FEATURE_MAPS)
        check_choice("output_gate", self.output_gate, ("sigmoid", "silu"))
        check_choice("activation", self.activation, ("gelu", "silu"))
        check_choice("update_rule", self.update_rule, UPDATE_RULES)
        check_choice("read", self.read, READ_MODES)
        check_choice("omega_gate_source", self.omega_gate_source, OMEGA_GATE_SOURCES)
        check_choice("qk_init", self.qk_init, QK_INITS)
        self.output_init = output_init_scale(self.output_init)  # "lecun" / "zero": 1 / 0
        for name in ("residual", "feature_projection"):
            check_bool(name, getattr(self, name))
        # upper ends: sizes far past any model, refused before they allocate (a memory of
        # depth 10^6 or a kernel of 10^9 taps would end in the allocator's error)
        for name, minimum, maximum in (
            ("chunk_size", 1, 2**16),
            ("omega_window", 1, 2**12),
            ("depth", 2, 64),
            ("poly_degree", 1, 16),
            ("conv_kernel", 1, 2**10),
        ):
            check_int(name, getattr(self, name), minimum, maximum)
        check_number("expansion", self.expansion, 0.0, 64.0, open_high=False)
        self._check_gate_bounds()
        if self.init_omega is not None:
            check_number("init_omega", self.init_omega, 0.0, 1.0)
        if self.feature_projection and self.feature_map is None:
            raise ValueError("feature_projection=True needs a feature_map to project")
        if self.residual and self.model == "linear":
            raise ValueError("residual=True is for the MLP memories, not model='linear'")

    def _check_gate_bounds(self) -> None:
        """Each gate's range, and an untrained value strictly inside it (a finite logit)."""
        check_choice("decay_target", self.decay_target, DECAY_TARGETS)
        # 10: a hundred times the default step; far past it the gates overflow to inf / NaN
        check_number("lr_max", self.lr_max, 0.0, 10.0, open_high=False)
        check_number("momentum_max", self.momentum_max, 0.0, 1.0, open_low=False, open_high=False)
        check_number("decay_min", self.decay_min, 0.0, 1.0, open_low=False)
        if self.max_grad_norm is not None:
            check_number("max_grad_norm", self.max_grad_norm, 0.0)
        check_number("init_lr", self.init_lr, 0.0, self.lr_max)
        if self.momentum_max == 0:
            if self.init_momentum != 0:
                raise ValueError(
                    f"init_momentum must be 0 when momentum_max=0 (no momentum), "
                    f"got {self.init_momentum}"
                )
        else:
            check_number("init_momentum", self.init_momentum, 0.0, self.momentum_max)
        check_number("init_decay", self.init_decay, self.decay_min, 1.0)
        check_number("timescale_ratio", self.timescale_ratio, 1.0, open_low=False)
        if self.timescale_lr_ratio is not None:
            check_number("timescale_lr_ratio", self.timescale_lr_ratio, 1.0, open_low=False)
            if self.timescale_lr_ratio > self.timescale_ratio:
                raise ValueError(
                    f"timescale_lr_ratio must be at most timescale_ratio "
                    f"({self.timescale_ratio}), got {self.timescale_lr_ratio}"
                )

    def head_scales(self, num_heads: int) -> list[float]:
        """Head h's factor on alpha (and on theta unless ``timescale_lr_ratio`` is set):
        ``timescale_ratio ** (-h / (H - 1))``, from 1 down to ``1 / timescale_ratio`` (all 1
        when the ratio is 1 or there is one head)."""
        return _log_spaced(self.timescale_ratio, num_heads)

    def lr_head_scales(self, num_heads: int) -> list[float]:
        """Head h's factor on theta: ``timescale_lr_ratio ** (-h / (H - 1))``, or
        ``head_scales`` when ``timescale_lr_ratio`` is None."""
        if self.timescale_lr_ratio is None:
            return self.head_scales(num_heads)
        return _log_spaced(self.timescale_lr_ratio, num_heads)

    def gate_biases(self) -> list[float]:
        """Logits of the untrained theta, eta, alpha (and Omega gates) under the bounded
        parametrisation: sigmoid(bias) is the gate's position inside its range."""
        biases = [
            _logit(self.init_lr / self.lr_max),
            # no momentum (momentum_max=0): eta is 0 whatever the logit
            _logit(self.init_momentum / self.momentum_max) if self.momentum_max else 0.0,
            _logit((self.init_decay - self.decay_min) / (1 - self.decay_min)),
        ]
        if self.omega_window > 1:
            biases += [_logit(self.omega_init)] * self.omega_window
        return biases

    @property
    def omega_init(self) -> float:
        """The untrained Omega gate: ``init_omega``, or 1 / c when unset."""
        return self.init_omega if self.init_omega is not None else 1.0 / self.omega_window


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _log_spaced(ratio: float, num_heads: int) -> list[float]:
    """``ratio ** (-h / (H - 1))`` for h = 0 .. H - 1: 1 down to 1 / ratio."""
    steps = max(num_heads - 1, 1)
    return [ratio ** (-h / steps) for h in range(num_heads)]
