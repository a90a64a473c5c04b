"""Hand-written backwards equal autograd through their literal references (float64)."""

import pytest
import torch

from helpers import assert_close
from titans_atlas.ops import newton_schulz5, newton_schulz5_reference
from titans_atlas.ops.chunk_update import decayed_rank_update, decayed_rank_update_reference


def grads_of(fn, inputs, probes):
    outputs = fn(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    loss = sum((out * probe).sum() for out, probe in zip(outputs, probes))
    return outputs, torch.autograd.grad(loss, inputs)


def test_decayed_rank_update_matches_autograd():
    g, m, n, u = 3, 5, 7, 4
    shapes = {
        "weights": (g, m, n),
        "momentum": (g, m, n),
        "end_keep": (g, 1, 1),
        "end_momentum": (g, 1, 1),
        "momentum_carry": (g, 1, 1),
        "a_t": (g, m, u),
        "end_rows": (g, u, n),
        "momentum_rows": (g, u, n),
    }
    inputs = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes.values()]
    probes = [torch.randn(g, m, n, dtype=torch.float64) for _ in range(2)]

    def by_keyword(fn):
        return lambda *tensors: fn(**dict(zip(shapes, tensors)))

    fast, fast_grads = grads_of(by_keyword(decayed_rank_update), inputs, probes)
    ref, ref_grads = grads_of(by_keyword(decayed_rank_update_reference), inputs, probes)
    for a, e in zip(fast + fast_grads, ref + ref_grads):
        assert_close(a, e, rtol=1e-12)


@pytest.mark.parametrize("shape", [(4, 6, 11), (4, 11, 6), (2, 5, 5), (3, 1, 9)])
def test_newton_schulz5_gradient_matches_autograd_through_the_iteration(shape):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    probe = [torch.randn(*shape, dtype=torch.float64)]
    fast, fast_grad = grads_of(newton_schulz5, [x], probe)
    ref, ref_grad = grads_of(newton_schulz5_reference, [x], probe)
    assert_close(fast[0], ref[0], rtol=1e-12)
    assert_close(fast_grad[0], ref_grad[0], rtol=1e-10)


def test_newton_schulz5_gradient_with_leading_axes_and_a_zero_matrix():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    x[0, 1] = 0.0
    x.requires_grad_(True)
    probe = [torch.randn(2, 3, 4, 8, dtype=torch.float64)]
    _, fast_grad = grads_of(newton_schulz5, [x], probe)
    _, ref_grad = grads_of(newton_schulz5_reference, [x], probe)
    assert torch.isfinite(fast_grad[0]).all()
    assert_close(fast_grad[0], ref_grad[0], rtol=1e-10)
