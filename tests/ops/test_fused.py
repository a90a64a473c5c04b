"""Hand-written backwards equal autograd through their literal references (float64)."""

import pytest
import torch

from helpers import assert_close, random_inputs, scan
from titans_atlas.ops import MLPMemory, newton_schulz5, newton_schulz5_reference
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


def saved_bytes(fn):
    """Bytes autograd keeps for backward while ``fn`` runs (each storage counted once)."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sum(storages.values())


def test_newton_schulz5_saves_only_its_input_and_norm():
    """The backward recomputes the iterates: nothing of the five steps is kept -- unless
    asked (under activation checkpointing), then X_k, G_k, P_k of each step."""
    x = torch.randn(6, 8, 32, requires_grad=True)
    assert saved_bytes(lambda: newton_schulz5(x)) == (x.numel() + 6) * 4
    per_step = 6 * (8 * 32 + 2 * 8 * 8)
    with_iterates = saved_bytes(lambda: newton_schulz5(x, save_iterates=True))
    assert with_iterates == (x.numel() + 6 + 5 * per_step) * 4


@pytest.mark.parametrize("save_iterates", [False, True])
def test_newton_schulz5_gradient_is_the_same_either_way(save_iterates):
    x = torch.randn(3, 6, 11, dtype=torch.float64, requires_grad=True)
    probe = [torch.randn(3, 6, 11, dtype=torch.float64)]
    fast = lambda x: newton_schulz5(x, save_iterates=save_iterates)  # noqa: E731
    _, fast_grad = grads_of(fast, [x], probe)
    _, ref_grad = grads_of(newton_schulz5_reference, [x], probe)
    assert_close(fast_grad[0], ref_grad[0], rtol=1e-10)


def test_muon_scan_keeps_one_copy_of_the_materialised_momenta():
    """Per chunk, NS5(S_m) (read by every token): M m n floats per weight, plus smaller
    per-token tensors -- not the momenta S_m themselves (NS5's input, rebuilt in backward from
    their rank-1 factors), nor the 7.5 M m n more that saved NS5 iterates would add
    (m = 32, n = 128 here)."""
    memory, chunk, length, heads = MLPMemory(32, 32, expansion=4, residual=True), 8, 16, 2
    inputs = random_inputs(memory, batch=1, length=length, heads=heads, window=2)
    inputs = {n: x.float().requires_grad_() for n, x in inputs.items()}
    weights = {n: w.requires_grad_() for n, w in memory.init_weights(heads).items()}
    state = memory.initial_state(weights, 1)
    kwargs = dict(chunk_size=chunk, omega_window=2, update_rule="muon", impl="chunk")
    saved = saved_bytes(lambda: scan(memory, inputs, state, **kwargs))
    momenta = length * heads * len(weights) * 32 * 128 * 4  # N M H G m n fp32
    assert momenta <= saved < 2 * momenta
