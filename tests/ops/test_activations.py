"""``activation_with_slope`` (one autograd node) equals its plain-ops reference: values, first
and second derivatives in float64, and it saves only its input for the backward."""

import pytest
import torch

from titans_atlas.ops.activations import activation_with_slope, activation_with_slope_reference

FORMS = (activation_with_slope_reference, activation_with_slope)


def _inputs(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    z = 3.0 * torch.randn(shape, generator=gen, dtype=torch.float64)
    probes = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    return z, probes


@pytest.mark.parametrize("name", ["gelu", "silu"])
@pytest.mark.parametrize("shape", [(1,), (7, 3), (2, 63, 5)])
def test_values_and_gradients_equal_the_reference(name, shape):
    z, (p_act, p_slope) = _inputs(shape)
    results = []
    for form in FORMS:
        leaf = z.clone().requires_grad_(True)
        act, slope = form(name, leaf)
        loss = (p_act * act).sum() + (p_slope * slope).sum()
        (grad,) = torch.autograd.grad(loss, leaf, create_graph=True)
        (second,) = torch.autograd.grad((grad * grad).sum(), leaf)
        results.append((act, slope, grad, second))
    for fused, ref, what in zip(results[1], results[0], ("act", "slope", "grad", "2nd")):
        torch.testing.assert_close(fused, ref, rtol=1e-12, atol=1e-12, msg=what)


@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_gradcheck(name):
    z, _ = _inputs((4, 5), seed=1)
    z.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: activation_with_slope(name, x), (z,))
    assert torch.autograd.gradgradcheck(lambda x: activation_with_slope(name, x), (z,))


@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_saves_only_its_input(name):
    """The point of the fused node: one z-sized tensor kept for the backward, where the
    plain ops keep several."""
    z = torch.randn(8, 16, requires_grad=True)
    saved = {}
    for form in FORMS:
        kept = []

        def keep(t, kept=kept):
            kept.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            form(name, z)
        saved[form.__name__] = sum(t.numel() for t in kept)
    assert saved["activation_with_slope"] == z.numel()
    assert saved["activation_with_slope_reference"] >= 3 * z.numel()


def test_without_a_gradient_it_is_the_reference():
    z = torch.randn(5)
    for name in ("gelu", "silu"):
        for a, b in zip(activation_with_slope(name, z), activation_with_slope_reference(name, z)):
            assert torch.equal(a, b)
