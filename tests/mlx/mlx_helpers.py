"""Helpers of the MLX tests: torch <-> MLX conversion and running one memory scan on both
sides from the same inputs (imported only after ``pytest.importorskip("mlx.core")``)."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import torch

import titans_atlas.mlx.ops as mops
from helpers import INPUT_NAMES, scan
from titans_atlas.mlx.ops.memory_models import MemoryModel

# float32 parity bound: max |mlx - torch| <= RTOL_F32 * max(1, max |torch|).
RTOL_F32 = 1e-4
# float64 bound: MLX's float64 exp and erf on CPU are float32-accurate (~1e-7 relative), so
# float64 parity holds to ~1e-6, not to float64 precision.
RTOL_F64 = 1e-5


def to_mx(x, dtype=None):
    """A torch tensor (or None / a dict of them) as MLX arrays of the same dtype."""
    if x is None:
        return None
    if isinstance(x, dict):
        return {k: to_mx(v, dtype) for k, v in x.items()}
    array = x.detach().cpu().numpy()
    if dtype is None:
        dtype = {np.float64: mx.float64, np.float32: mx.float32}.get(array.dtype.type)
    return mx.array(array, dtype=dtype) if dtype is not None else mx.array(array)


def to_np(x) -> np.ndarray:
    if isinstance(x, mx.array):
        return np.array(x)
    return x.detach().cpu().numpy()


def assert_close(actual, expected, rtol: float, name: str = "") -> None:
    """max |a - e| <= rtol * max(1, max |e|), on numpy copies of MLX arrays / torch tensors."""
    actual, expected = to_np(actual), to_np(expected)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    if expected.size == 0:
        return
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(actual.astype(np.float64) - expected).max())
    assert err <= rtol * scale, f"{name}: max abs error {err:.3e} > {rtol:.0e} x {scale:.3e}"


def assert_states_close(actual, expected, rtol: float) -> None:
    assert actual.position == expected.position
    for name in expected.weights:
        assert_close(actual.weights[name], expected.weights[name], rtol, f"weights[{name}]")
        assert_close(actual.momentum[name], expected.momentum[name], rtol, f"momentum[{name}]")


@dataclasses.dataclass(frozen=True)
class AffineMemory(MemoryModel):
    """The MLX mirror of tests/helpers.py's test-only ``AffineMemory``: f(W, x) = x W1 + b,
    so f(W, 0) != 0 and a scan that keeps Omega taps before the stream start goes wrong."""

    dim_in: int
    dim_out: int

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        return {"w1": (self.dim_in, self.dim_out), "bias": (1, self.dim_out)}

    def forward_with(self, linear, x: mx.array) -> mx.array:
        return linear("w1", x) + linear("bias", mx.ones((*x.shape[:-1], 1), dtype=x.dtype))

    def grad_factors(self, weights, k: mx.array, v: mx.array):
        delta = k @ weights["w1"] + weights["bias"] - v  # bias [B, H, 1, Dv] over the tokens
        return {"w1": (k, delta), "bias": (mx.ones((*k.shape[:-1], 1), dtype=k.dtype), delta)}


TEST_MEMORIES = {"AffineMemory": AffineMemory}


def mirror_memory(memory):
    """The MLX memory model with the same class name and fields as a torch one (the library's,
    or a test-only memory's mirror above)."""
    name = type(memory).__name__
    cls = TEST_MEMORIES.get(name) or getattr(mops, name)
    return cls(**{f.name: getattr(memory, f.name) for f in dataclasses.fields(memory)})


def mlx_state(memory_mx, weights, momentum, batch: int):
    """A fresh MLX stream from torch initial weights and a torch initial momentum."""
    state = memory_mx.initial_state(to_mx(weights), batch)
    state.momentum = to_mx(momentum)
    return state


def mlx_scan(memory_mx, inputs: dict, state, **kwargs):
    """``mops.memory_scan`` on torch ``inputs`` (converted) from an MLX ``state``."""
    args = {n: to_mx(inputs[n]) for n in INPUT_NAMES if n != "omega_gate"}
    return mops.memory_scan(
        memory_mx, state=state, omega_gate=to_mx(inputs.get("omega_gate")), **args, **kwargs
    )


def torch_scan(memory, inputs, weights, momentum, grad=False, **kwargs):
    """The torch per-token reference from the same start (recording autograd if ``grad``)."""
    state = memory.initial_state(weights, inputs["q"].shape[0])
    state.momentum = dict(momentum)
    with torch.set_grad_enabled(grad):
        return scan(memory, inputs, state, impl="reference", **kwargs)
