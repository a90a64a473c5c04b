"""The ATLAS family in MLX: the LMM / MAG / MAL layouts with the ATLAS memory. The memory
settings (Omega window, polynomial features, Muon, residual MLP) are the torch registry's
defaults for these names, so only the layouts are named here."""

from __future__ import annotations

from .backbone import register
from .lmm import LMM
from .mag import MAG
from .mal import MAL


@register("atlas")
class Atlas(LMM):
    """LMM layout with the ATLAS memory."""


@register("atlas-mag")
class AtlasMAG(MAG):
    """MAG layout with the ATLAS memory."""


@register("atlas-mal")
class AtlasMAL(MAL):
    """MAL layout with the ATLAS memory."""


@register("omeganet")
class OmegaNet(LMM):
    """Omega window + polynomial features with plain (Titans) momentum."""


@register("atlas++")
class AtlasPlusPlus(LMM):
    """Atlas with the gated (SwiGLU) MLP memory."""


@register("gdn")
class GatedDeltaNet(LMM):
    """The gated delta rule on the LMM layout (torch ``models/deltanet.py``)."""
