"""The ATLAS family (Behrouz et al. 2025, Section 5): the LMM / MAG / MAL layouts with the
ATLAS memory -- Omega window c = 8 (each gate from the token it weights), polynomial keys and
queries, Muon momentum, residual 2-layer MLP memory.

A residual memory needs key width == value width, and the degree-2 polynomial map widens a
64-wide head to 2145 features; so these presets name the learned projection back to the
head width (``feature_projection=True``). Set it to False with ``residual=False`` (or a
linear memory) for the unprojected map.
"""

from __future__ import annotations

from .backbone import register
from .lmm import LMM
from .mag import MAG
from .mal import MAL

ATLAS_MEMORY = {
    "model": "mlp",
    "depth": 2,
    "expansion": 4.0,
    "residual": True,
    "omega_window": 8,
    # each tap's gate from the token it weights: with the step's token (the layer default) an
    # Omega lmm never bound keys to values on the recall task (docs/architectures.md)
    "omega_gate_source": "tap",
    "feature_map": "polynomial",
    "poly_degree": 2,
    "feature_projection": True,
    "update_rule": "muon",
    # LeCun's last weight, the scale every ATLAS result was measured with; a residual memory
    # reads its key whatever the scale (MQAR's smallest cell: omeganet 0.593 at 1, 0.588 at
    # the layer's 0.5, which is measured on the plain memories)
    "output_init": 1.0,
}


@register("atlas", memory=ATLAS_MEMORY)
class Atlas(LMM):
    """LMM layout with the ATLAS memory."""


@register("atlas-mag", memory=ATLAS_MEMORY)
class AtlasMAG(MAG):
    """MAG layout with the ATLAS memory."""


@register("atlas-mal", memory=ATLAS_MEMORY)
class AtlasMAL(MAL):
    """MAL layout with the ATLAS memory."""


# Plain momentum writes what the gradient says, at most theta x the clipped gradient; Muon
# writes an orthogonalised, unit-scale step. A residual memory reads its query whole (q +
# mlp(q)), so a small write is drowned by the read's q. OmegaNet's writes therefore start at
# theta 0.1 with room up to 1 (the layer: 0.02, up to 0.1): MQAR's smallest cell 0.593 ->
# 0.961 (docs/results.md, section 3; research/LOG.md, section 19).
OMEGANET_MEMORY = {**ATLAS_MEMORY, "update_rule": "momentum", "lr_max": 1.0, "init_lr": 0.1}
# Preset memory values that moved, with what they were before (2026-12-08): a checkpoint old
# enough to hold no model config of its own was trained with these.
PRESET_MEMORY_BEFORE = {"omeganet": {"init_lr": 0.02, "lr_max": 0.1}}


@register("omeganet", memory=OMEGANET_MEMORY)
class OmegaNet(LMM):
    """Omega window + polynomial features with plain (Titans) momentum."""


@register("atlas++", memory={**ATLAS_MEMORY, "model": "gated_mlp"})
class AtlasPlusPlus(LMM):
    """Atlas with the gated (SwiGLU) MLP memory."""
