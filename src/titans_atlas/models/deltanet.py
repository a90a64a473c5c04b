"""The gated delta rule (Yang, Kautz, Hatamizadeh 2024) as a configuration of this engine:
a control beside the Titans and ATLAS memories, registered as ``gdn``.

With a linear memory f(W, k) = k W (W [Dk, Dv]), L2-normalised keys, no momentum and no
gradient clip, the Titans update with inner step theta_t and keep a_t = 1 - alpha_t is

    W_t = a_t W_{t-1} - theta_t k_t^T (k_t W_{t-1} - v_t)
        = (a_t I - theta_t k_t^T k_t) W_{t-1} + theta_t k_t^T v_t,

the gated delta rule W_t = a_t (I - beta_t k_t^T k_t) W_{t-1} + beta_t k_t^T v_t with
beta_t = theta_t / a_t and the write scaled by a_t (~1 for a slowly forgetting memory): the
same family. ``lr_max = 1`` lets the step reach a full overwrite (after theta = a = 1 the
memory returns v_t for k_t exactly), which is contractive because ||k_t|| = 1. ``chunk_size =
1`` runs the sequential rule exactly; a larger chunk takes each chunk's gradients at the
chunk's first weights (Titans' parallel form), a different model that trains faster.
No new code: the layer, scan and kernels are the Titans ones.
"""

from __future__ import annotations

from .backbone import register
from .lmm import LMM

GATED_DELTA_MEMORY = {
    "model": "linear",
    "momentum_max": 0.0,  # no momentum: eta = 0
    "init_momentum": 0.0,
    "lr_max": 1.0,  # beta up to a full overwrite
    "init_lr": 0.5,
    "max_grad_norm": None,  # the delta rule's write is bounded by the unit key already
    "chunk_size": 1,
}


@register("gdn", memory=GATED_DELTA_MEMORY)
class GatedDeltaNet(LMM):
    """The gated delta rule on the LMM layout: memory layers and feed-forwards only."""
