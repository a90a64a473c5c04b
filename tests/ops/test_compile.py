"""The hot path reads no tensor values (no host-device sync), value checks follow the
``validate`` switch, and ``memory_scan`` traces into one graph under ``torch.compile``."""

import pytest
import torch

from helpers import MEMORIES, assert_close, assert_states_close, random_inputs, scan
from titans_atlas.ops import UPDATE_RULES, validating

RULES = list(UPDATE_RULES)


def setup(memory_id="mlp", length=9, window=2):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, length=length, window=window, dtype=torch.float32)
    weights = {n: w.requires_grad_() for n, w in memory.init_weights(2).items()}
    return memory, inputs, memory.initial_state(weights, 2)


def refuse(*args, **kwargs):
    raise AssertionError("the hot path read a tensor's value (a host-device sync on a GPU)")


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
@pytest.mark.parametrize("rule", RULES)
def test_without_value_checks_no_tensor_value_is_read(monkeypatch, rule, impl):
    """Forward and backward never turn a tensor into a Python value when validate=False."""
    memory, inputs, state = setup()
    for leaf in (inputs["q"], inputs["lr"]):
        leaf.requires_grad_(True)
    for method in ("__bool__", "item", "tolist", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    kwargs = dict(chunk_size=4, omega_window=2, update_rule=rule, impl=impl, validate=False)
    y, new = scan(memory, inputs, state, **kwargs)
    (y.sum() + sum(w.sum() for w in new.weights.values())).backward()
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="host-device"):  # the checks do read values
        monkeypatch.setattr(torch.Tensor, "__bool__", refuse)
        scan(memory, inputs, state, **{**kwargs, "validate": True})


def test_value_checks_follow_the_switch():
    memory, inputs, state = setup()
    inputs["q"][0, 3, 1, 2] = float("nan")
    inputs["momentum"][1, 2, 0] = 1.5
    kwargs = dict(chunk_size=4, omega_window=2)
    with pytest.raises(ValueError, match="q contains NaN"):
        scan(memory, inputs, state, **kwargs)
    y, _ = scan(memory, inputs, state, validate=False, **kwargs)
    assert y[0].isnan().any() and not y[1].isnan().any()  # NaN stays in its own sample
    with validating(False):
        scan(memory, inputs, state, **kwargs)
        with pytest.raises(ValueError, match="q contains NaN"):
            scan(memory, inputs, state, validate=True, **kwargs)
    with pytest.raises(ValueError, match="q contains NaN"):  # the default is back
        scan(memory, inputs, state, **kwargs)
    with pytest.raises(ValueError, match="validate"):
        scan(memory, inputs, state, validate="no", **kwargs)


def compiled_equals_eager(rule, backend, memory_id="linear"):
    memory, inputs, state = setup(memory_id, length=6)
    kwargs = dict(chunk_size=4, omega_window=2, update_rule=rule, impl="chunk")
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda i, s: scan(memory, i, s, **kwargs), fullgraph=True, backend=backend
    )
    y, new = compiled(inputs, state)
    y_eager, new_eager = scan(memory, inputs, state, **kwargs)
    assert_close(y, y_eager, rtol=1e-5)
    assert_states_close(new, new_eager, rtol=1e-5)
    inputs["q"][0, 0, 0, 0] = float("nan")  # value checks are skipped while compiled
    assert compiled(inputs, state)[0].isnan().any()


def test_memory_scan_traces_into_one_graph():
    """fullgraph=True fails on any graph break (a host sync, an unsupported construct)."""
    compiled_equals_eager("momentum", backend="eager")


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULES)
def test_inductor_compiled_memory_scan_equals_eager(rule):
    """CPU inductor (needs a C compiler): minutes on a busy 2-core machine."""
    compiled_equals_eager(rule, backend="inductor", memory_id="mlp")
