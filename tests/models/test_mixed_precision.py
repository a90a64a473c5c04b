"""Every model trains under bf16 autocast with CUDA's dtype pattern: normalisations (L2 norm,
RMSNorm, softmax, exp, ...) come out fp32, matrix products bf16. CPU autocast keeps them all
bf16, so a CPU-only suite could not see a model hand the memory fp32 queries beside bf16
values; ``cuda_autocast_pattern`` reproduces CUDA's casts on the CPU. A GPU-marked test trains
each model a few steps under real CUDA autocast.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import titans_atlas as ta
from titans_atlas.layers import MemoryLayerState

TINY = {"vocab_size": 50, "dim": 16, "depth": 2, "num_heads": 2, "window": 4, "chunk_size": 3}
LOW = (torch.bfloat16, torch.float16)
Tensor = torch.Tensor
# The ops CUDA autocast runs in fp32 (its "fp32" and "fp32_set_opt_dtype" lists), at the level
# the models call them; the lower-precision list (linear, matmul, conv, SDPA) CPU autocast
# already casts to bf16 as CUDA does.
CUDA_FP32 = {
    F.normalize, F.rms_norm, F.layer_norm, F.group_norm, F.softmax, F.log_softmax,
    F.softplus, F.cross_entropy, F.nll_loss, F.mse_loss,
    torch.norm, torch.linalg.vector_norm, torch.linalg.norm, torch.softmax, torch.log_softmax,
    torch.exp, torch.expm1, torch.log, torch.log1p, torch.pow, torch.rsqrt, torch.reciprocal,
    torch.cumsum, torch.cumprod, torch.prod, torch.logsumexp,
    Tensor.norm, Tensor.softmax, Tensor.log_softmax, Tensor.exp, Tensor.expm1, Tensor.log,
    Tensor.log1p, Tensor.pow, Tensor.__pow__, Tensor.rsqrt, Tensor.reciprocal, Tensor.cumsum,
    Tensor.cumprod, Tensor.prod, Tensor.logsumexp,
}  # fmt: skip


def _lowp(value) -> bool:
    if isinstance(value, list | tuple):
        return any(_lowp(v) for v in value)
    return isinstance(value, torch.Tensor) and value.dtype in LOW


def _to_fp32(value):
    if isinstance(value, list | tuple):
        return type(value)(_to_fp32(v) for v in value)
    return value.float() if _lowp(value) else value


class cuda_autocast_pattern(TorchFunctionMode):
    """CPU bf16 autocast plus CUDA's fp32 casts for the ops in ``CUDA_FP32``. Acts only where
    autocast is on (a region that disables it -- memory_scan's recurrence -- is left alone, as
    on CUDA). ``casts`` counts the ops it moved to fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        self.casts = 0

    def __enter__(self):
        self.autocast.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        return self.autocast.__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in CUDA_FP32 and torch.is_autocast_enabled("cpu"):
            self.casts += _lowp(args) or _lowp(list(kwargs.values()))
            args, kwargs = _to_fp32(args), {k: _to_fp32(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def test_the_pattern_is_cudas_normalisations_fp32_products_bf16():
    x, w = torch.randn(2, 8), torch.randn(8, 8)
    with cuda_autocast_pattern() as mode:
        y = F.linear(x, w)
        normalised, rms = F.normalize(y, dim=-1), F.rms_norm(y, (8,), torch.ones(8))
        with torch.autocast("cpu", enabled=False):
            untouched = F.normalize(y, dim=-1)
    assert y.dtype == torch.bfloat16
    assert normalised.dtype == rms.dtype == torch.float32 and mode.casts == 2
    assert untouched.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):  # plain CPU autocast differs: all bf16
        assert F.normalize(F.linear(x, w), dim=-1).dtype == torch.bfloat16


def memory_layers(state: ta.ModelState) -> list[MemoryLayerState]:
    layers = [
        b if isinstance(b, MemoryLayerState) else getattr(b, "memory", None) for b in state.blocks
    ]
    return [layer for layer in layers if layer is not None]


@pytest.mark.parametrize("name", ta.list_models())
def test_every_model_trains_and_streams_under_cudas_autocast_pattern(name):
    torch.manual_seed(0)
    model = ta.create_model(name, **TINY)
    ids = torch.randint(0, 50, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference, _ = model(ids)
    with cuda_autocast_pattern() as mode:
        logits, state = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten())
        with torch.no_grad():
            first, streamed = model(ids[:, :6])
            rest, _ = model(ids[:, 6:], streamed)
    assert mode.casts > 0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    for layer in memory_layers(state):
        assert {w.dtype for w in layer.memory.weights.values()} == {torch.float32}
    assert (logits.float() - reference).abs().max() < 0.1 * reference.abs().max()
    assert (torch.cat([first, rest], 1).float() - logits.float()).abs().max() < 0.05


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ta.list_models())
def test_every_model_trains_a_few_steps_under_cuda_bf16_autocast(name):
    torch.manual_seed(0)
    model = ta.create_model(name, **{**TINY, "dim": 32}).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, 50, (4, 33), device="cuda", generator=None)
    losses = []
    for _ in range(4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, state = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
    for layer in memory_layers(state):
        assert {w.dtype for w in layer.memory.weights.values()} == {torch.float32}
