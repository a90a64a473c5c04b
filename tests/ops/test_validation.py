"""Bad input to the memory engine raises a ValueError that names it, never a deep torch error,
a silent broadcast or a NaN; and a failed call leaves the caller's state as it was.

Tables: a case is (id, the bad input, words the message must contain); the exception is a
ValueError for every entry point of ops (``TABLE`` pairs each case with it). To add a case, add
a row to the table of its entry point: the message test and, for memory_scan's SCAN_CASES, the
property that a failed call leaves a valid mid-stream state untouched both pick it up.
"""

import math

import pytest
import torch

import titans_atlas.ops.scan as scan_module
from helpers import MEMORIES, CountSyncs, random_inputs, scan
from titans_atlas.ops import (
    SCAN_IMPLS,
    GatedMLPMemory,
    LinearMemory,
    MemoryState,
    MLPMemory,
    ScanOptions,
    memory_scan,
    newton_schulz5,
    newton_schulz5_reference,
    polynomial_features,
    update_rule_from_muon,
    validating,
)
from titans_atlas.ops.state import map_tensors

NAN = float("nan")


FRESH = object()


def call(memory_id="mlp", length=5, window=1, state=FRESH, **changes):
    """memory_scan on valid inputs (2 samples, 2 heads, chunk 2) with ``changes`` applied."""
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, length=length, window=window, dtype=torch.float32)
    kwargs = {"chunk_size": 2, "omega_window": window}
    for name, value in changes.items():
        (inputs if name in inputs else kwargs)[name] = value
    if state is FRESH:
        state = memory.initial_state(memory.init_weights(2), 2)
    return scan(memory, inputs, state, **kwargs)


def with_nan(shape, index=(0, 1)):
    x = torch.rand(shape)
    x[index] = NAN
    return x


# memory_scan: (id, changes to a valid call, words the message must contain)
SCAN_CASES = [
    ("q 3-D", {"q": torch.randn(2, 5, 2)}, ["q", "[B, T, H, D]"]),
    ("q a list", {"q": [[0.0]]}, ["q", "list"]),
    ("q integer", {"q": torch.ones(2, 5, 2, 5, dtype=torch.long)}, ["q", "floating-point"]),
    ("q NaN", {"q": with_nan((2, 5, 2, 5))}, ["q", "NaN"]),
    ("v inf", {"v": torch.full((2, 5, 2, 3), math.inf)}, ["v", "inf"]),
    ("k shorter", {"k": torch.randn(2, 4, 2, 5)}, ["k", "shape"]),
    ("k other batch", {"k": torch.randn(1, 5, 2, 5)}, ["k", "shape"]),
    ("v other heads", {"v": torch.randn(2, 5, 3, 3)}, ["v", "Dv"]),
    ("v width", {"v": torch.randn(2, 5, 2, 4)}, ["v width", "dim_out"]),
    ("q/k width", {"q": torch.randn(2, 5, 2, 4), "k": torch.randn(2, 5, 2, 4)}, ["q/k", "dim_in"]),
    ("lr 2-D", {"lr": torch.rand(2, 5)}, ["lr", "shape"]),
    ("lr one head", {"lr": torch.rand(2, 5, 1)}, ["lr", "shape"]),
    ("lr negative", {"lr": -torch.rand(2, 5, 2)}, ["lr", ">= 0.0"]),
    ("lr integer", {"lr": torch.zeros(2, 5, 2, dtype=torch.long)}, ["lr", "floating-point"]),
    ("momentum above 1", {"momentum": 1 + torch.rand(2, 5, 2)}, ["momentum", "[0.0, 1.0]"]),
    ("decay NaN", {"decay": with_nan((2, 5, 2))}, ["decay", "NaN"]),
    ("chunk_size 0", {"chunk_size": 0}, ["chunk_size", ">= 1"]),
    ("chunk_size 2.5", {"chunk_size": 2.5}, ["chunk_size", "integer"]),
    ("chunk_size True", {"chunk_size": True}, ["chunk_size", "integer"]),
    ("read during", {"read": "during"}, ["read", "after"]),
    ("impl fast", {"impl": "fast"}, ["impl", "chunk"]),
    ("muon yes", {"muon": "yes"}, ["muon", "token"]),
    ("muon 1", {"muon": 1}, ["muon"]),
    ("update_rule adam", {"update_rule": "adam"}, ["update_rule", "muon_chunk"]),
    ("muon and update_rule", {"update_rule": "muon", "muon": True}, ["not both"]),
    ("checkpoint a string", {"checkpoint": "no"}, ["checkpoint"]),
    ("validate a string", {"validate": "no"}, ["validate"]),
    ("omega_window 0", {"omega_window": 0}, ["omega_window", ">= 1"]),
    ("omega_window without gate", {"omega_window": 3}, ["omega_gate", "required"]),
    ("omega_gate too wide", {"omega_gate": torch.rand(2, 5, 2, 3)}, ["omega_gate", "shape"]),
    (
        "omega_gate above 1",
        {"omega_window": 2, "omega_gate": torch.full((2, 5, 2, 2), 2.0)},
        ["omega_gate", "[0.0, 1.0]"],
    ),
    ("max_grad_norm 0", {"max_grad_norm": 0.0}, ["max_grad_norm", "(0.0, inf)"]),
    ("max_grad_norm -1", {"max_grad_norm": -1.0}, ["max_grad_norm"]),
    ("max_grad_norm NaN", {"max_grad_norm": NAN}, ["max_grad_norm"]),
    ("max_grad_norm inf", {"max_grad_norm": math.inf}, ["max_grad_norm"]),
    ("max_grad_norm a string", {"max_grad_norm": "1"}, ["max_grad_norm"]),
    ("decay_to a tensor", {"decay_to": torch.zeros(2, 5, 12)}, ["decay_to", "dict"]),
    ("decay_to missing w2", {"decay_to": {"w1": torch.zeros(2, 5, 10)}}, ["decay_to", "w2"]),
    (
        "decay_to for 3 heads",
        {"decay_to": {"w1": torch.zeros(3, 5, 10), "w2": torch.zeros(3, 10, 3)}},
        ["decay_to['w1']", "[H] = [2]"],
    ),
    (
        "decay_to for batch 3",
        {"decay_to": {"w1": torch.zeros(3, 2, 5, 10), "w2": torch.zeros(3, 2, 10, 3)}},
        ["decay_to['w1']", "[B, H] = [2, 2]"],
    ),
    (
        "decay_to wrong width",
        {"decay_to": {"w1": torch.zeros(2, 5, 9), "w2": torch.zeros(2, 10, 3)}},
        ["decay_to['w1']", "5, 10"],
    ),
    (
        "decay_to NaN",
        {"decay_to": {"w1": with_nan((2, 5, 10)), "w2": torch.zeros(2, 10, 3)}},
        ["decay_to['w1']", "NaN"],
    ),
    ("q on the meta device", {"q": torch.randn(2, 5, 2, 5, device="meta")}, ["q", "meta"]),
    ("k on the meta device", {"k": torch.randn(2, 5, 2, 5, device="meta")}, ["k is on meta"]),
    ("lr on the meta device", {"lr": torch.rand(2, 5, 2, device="meta")}, ["lr is on meta"]),
    (
        "decay_to integer",
        {"decay_to": {"w1": torch.zeros(2, 5, 10, dtype=torch.long), "w2": torch.zeros(2, 10, 3)}},
        ["decay_to['w1']", "floating"],
    ),
]


def state_of(memory_id="mlp", batch=2, dtype=torch.float32):
    memory = MEMORIES[memory_id]
    return memory.initial_state(memory.init_weights(2, dtype=dtype), batch)


def bad_state(group="weights", change=None, **fields):
    """A fresh state with ``change`` applied to ``state.<group>['w1']`` and ``fields`` set."""

    def make():
        state = state_of()
        tensors = dict(getattr(state, group))
        if change is not None:
            tensors["w1"] = change(tensors["w1"])
        return MemoryState(**{**state.__dict__, group: tensors, **fields})

    return make


# memory_scan with a bad state: (id, makes the state, words)
STATE_CASES = [
    ("state None", lambda: None, ["state", "MemoryState"]),
    ("state for batch 3", lambda: state_of(batch=3), ["state", "batch 3"]),
    ("state of another memory", lambda: state_of("gated"), ["state.weights", "keys"]),
    ("integer weights (was a GELU error)", bad_state(change=torch.Tensor.long), ["w1", "floating"]),
    ("integer momentum", bad_state("momentum", torch.Tensor.int), ["state.momentum", "floating"]),
    ("float64 momentum", bad_state("momentum", torch.Tensor.double), ["state.momentum", "dtype"]),
    ("NaN weights", bad_state(change=lambda w: w.clone().fill_(NAN)), ["state.weights", "NaN"]),
    ("inf momentum", bad_state("momentum", lambda m: m + math.inf), ["state.momentum", "inf"]),
    (
        "momentum for batch 3",
        bad_state("momentum", lambda m: m[:1].expand(3, *m.shape[1:])),
        ["state.momentum['w1']", "[B, H] = [2, 2]"],
    ),
    (
        "momentum for batch 1 (was broadcast)",
        bad_state("momentum", lambda m: m[:1]),
        ["state.momentum['w1']", "[1, 2, 5, 10]"],
    ),
    ("weights on meta", bad_state(change=lambda w: w.to("meta")), ["state.weights['w1']", "meta"]),
    ("position -1", bad_state(position=-1), ["state.position", ">= 0"]),
    ("position 2.5", bad_state(position=2.5), ["state.position", "integer"]),
    ("inside a chunk without base", bad_state(position=3, chunk_size=2), ["state.base"]),
    ("another chunk grid", bad_state(position=4, chunk_size=4), ["chunk_size", "anchored"]),
    ("another window", bad_state(position=4, chunk_size=2, omega_window=3), ["omega_window"]),
]

weights = MLPMemory(4, 4).init_weights(2)
# every other entry point: (id, the call, words)
OTHER_CASES = [
    (
        "MLPMemory residual with dim_in != dim_out",
        lambda: MLPMemory(4, 5, residual=True),
        ["residual", "dim_in"],
    ),
    (
        "GatedMLPMemory residual with dim_in != dim_out",
        lambda: GatedMLPMemory(4, 5, residual=True),
        ["residual"],
    ),
    ("MLPMemory residual a string", lambda: MLPMemory(4, 4, residual="no"), ["residual"]),
    ("MLPMemory depth 1", lambda: MLPMemory(4, 4, depth=1), ["depth", "LinearMemory"]),
    ("MLPMemory depth 2.5", lambda: MLPMemory(4, 4, depth=2.5), ["depth", "integer"]),
    ("MLPMemory activation relu", lambda: MLPMemory(4, 4, activation="relu"), ["activation"]),
    ("MLPMemory expansion 0", lambda: MLPMemory(4, 4, expansion=0), ["expansion"]),
    ("MLPMemory expansion inf", lambda: MLPMemory(4, 4, expansion=math.inf), ["expansion"]),
    ("MLPMemory expansion 0.01", lambda: MLPMemory(4, 4, expansion=0.01), ["expansion", ">= 1"]),
    ("LinearMemory dim_in 0", lambda: LinearMemory(0, 4), ["dim_in"]),
    ("LinearMemory dim_out 2.5", lambda: LinearMemory(4, 2.5), ["dim_out"]),
    ("init_weights num_heads 0", lambda: LinearMemory(4, 4).init_weights(0), ["num_heads"]),
    ("init_weights num_heads 2.5", lambda: LinearMemory(4, 4).init_weights(2.5), ["num_heads"]),
    ("init_weights num_heads '2'", lambda: LinearMemory(4, 4).init_weights("2"), ["num_heads"]),
    (
        "init_weights integer dtype",
        lambda: MLPMemory(4, 4).init_weights(2, dtype=torch.long),
        ["dtype", "floating"],
    ),
    (
        "initial_state batch_size '2'",
        lambda: MLPMemory(4, 4).initial_state(weights, "2"),
        ["batch_size"],
    ),
    (
        "initial_state batch_size 0",
        lambda: MLPMemory(4, 4).initial_state(weights, 0),
        ["batch_size"],
    ),
    (
        "initial_state a missing weight",
        lambda: MLPMemory(4, 4).initial_state({"w1": weights["w1"]}, 2),
        ["weights", "keys"],
    ),
    (
        "initial_state a weight of another shape",
        lambda: MLPMemory(4, 4).initial_state({**weights, "w2": torch.zeros(2, 3, 3)}, 2),
        ["weights['w2']"],
    ),
    (
        "initial_state integer weights",
        lambda: MLPMemory(4, 4).initial_state({n: w.long() for n, w in weights.items()}, 2),
        ["weights['w1']", "floating"],
    ),
    ("newton_schulz5 of a vector", lambda: newton_schulz5(torch.randn(5)), ["x", "2 dimensions"]),
    (
        "newton_schulz5_reference of a vector",
        lambda: newton_schulz5_reference(torch.randn(5)),
        ["x", "2 dimensions"],
    ),
    (
        "newton_schulz5 of integers",
        lambda: newton_schulz5(torch.ones(3, 3, dtype=torch.long)),
        ["x", "floating"],
    ),
    ("polynomial degree 0", lambda: polynomial_features(torch.randn(3, 4), 0), ["degree"]),
    ("polynomial degree 2.5", lambda: polynomial_features(torch.randn(3, 4), 2.5), ["degree"]),
    (
        "polynomial coefficients",
        lambda: polynomial_features(torch.randn(3, 4), 2, torch.ones(2)),
        ["coefficients"],
    ),
    ("ScanOptions chunk_size 0", lambda: ScanOptions(chunk_size=0), ["chunk_size"]),
    ("ScanOptions update_rule sgd", lambda: ScanOptions(update_rule="sgd"), ["update_rule"]),
    ("validating a string", lambda: validating("yes").__enter__(), ["enabled"]),
    ("update_rule_from_muon 'x'", lambda: update_rule_from_muon("x"), ["muon"]),
    (
        "memory_scan state with a NaN halo mid-stream",
        lambda: call(window=2, state=with_nan_halo(mid_stream_state())),
        ["state.halo_keys", "NaN"],
    ),
    (
        "memory_scan memory a string",
        lambda: memory_scan(
            "mlp", *[torch.zeros(1, 1, 1, 1)] * 3, *[torch.zeros(1, 1, 1)] * 3, state=None
        ),
        ["memory", "MemoryModel"],
    ),
]

# (the bad call, the exception it must raise, words its message must contain)
TABLE = (
    [
        pytest.param(lambda c=changes: call(**c), ValueError, words, id=f"memory_scan {name}")
        for name, changes, words in SCAN_CASES
    ]
    + [
        pytest.param(lambda s=make: call(state=s()), ValueError, words, id=f"memory_scan {name}")
        for name, make, words in STATE_CASES
    ]
    + [pytest.param(fn, ValueError, words, id=name) for name, fn, words in OTHER_CASES]
)


@pytest.mark.parametrize("bad_call, exception, words", TABLE)
def test_bad_input_raises_an_error_with_these_words(bad_call, exception, words):
    with pytest.raises(exception) as error:
        bad_call()
    for word in words:
        assert word in str(error.value), f"{word!r} not in {str(error.value)!r}"


def with_nan_halo(state):
    return MemoryState(**{**state.__dict__, "halo_keys": state.halo_keys + NAN})


def mid_stream_state():
    """A valid state inside a chunk, with base weights, momentum and an Omega halo."""
    memory = MEMORIES["mlp"]
    inputs = random_inputs(memory, length=3, window=2, dtype=torch.float32)
    return scan(memory, inputs, state_of(), chunk_size=2, omega_window=2)[1]


def snapshot(state):
    """Values, autograd versions (bumped by any in-place write) and the plain fields."""
    tensors = []
    map_tensors(state, lambda t: tensors.append((t.clone(), t._version)))
    fields = {k: v for k, v in state.__dict__.items() if not isinstance(v, dict | torch.Tensor)}
    return tensors, fields


def assert_unchanged(state, before):
    after = snapshot(state)
    assert after[1] == before[1]
    assert len(after[0]) == len(before[0])
    for (value, version), (old_value, old_version) in zip(after[0], before[0]):
        assert version == old_version and torch.equal(value, old_value)


@pytest.mark.parametrize(
    "changes", [pytest.param(changes, id=name) for name, changes, _ in SCAN_CASES]
)
def test_a_failed_call_leaves_a_valid_state_as_it_was(changes):
    state = mid_stream_state()
    assert state.base is not None and state.halo_keys is not None
    before = snapshot(state)
    with pytest.raises(ValueError):
        call(window=2, state=state, **changes)
    assert_unchanged(state, before)


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
@pytest.mark.parametrize("rule", ["momentum", "muon"])
def test_a_successful_call_leaves_its_state_as_it_was(impl, rule):
    state = mid_stream_state()
    before = snapshot(state)
    _, new = call(window=2, state=state, length=4, impl=impl, update_rule=rule)
    assert new.position == 7
    assert_unchanged(state, before)


@pytest.mark.parametrize("validate", [True, False])
def test_the_value_checks_of_a_call_sync_once_in_all(validate):
    """The value checks read every input and the state; collected as flags they wait for the
    device once per call, not once per tensor (mid-stream: base, halo and momentum too)."""
    state = mid_stream_state()
    with CountSyncs() as syncs:
        call(window=2, state=state, length=4, impl="chunk", validate=validate)
    assert syncs.count == (1 if validate else 0)


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
def test_finite_inputs_that_diverge_are_an_error_not_inf(impl):
    # lr has no upper bound in the op (the layer bounds it): a huge one on unit-scale keys
    # overflows, and a checked call says so instead of returning inf for the next call
    memory = MLPMemory(dim_in=4, dim_out=4, expansion=2)
    state = memory.initial_state(memory.init_weights(2, generator=torch.Generator()), 2)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, 2, 4, generator=gen) for _ in range(3))
    gates = [torch.full((2, 8, 2), x) for x in (1e30, 0.9, 0.01)]
    with pytest.raises(ValueError, match=r"the memory diverged: .* lr is too large"):
        memory_scan(memory, q, k, v, *gates, state, chunk_size=4, impl=impl)
    y, _ = memory_scan(memory, q, k, v, *gates, state, chunk_size=4, impl=impl, validate=False)
    assert not torch.isfinite(y).all()  # unchecked, it is what the recurrence computes


def test_every_impl_is_registered():
    assert set(scan_module.IMPLS) | {"auto"} == set(SCAN_IMPLS)


def test_a_mid_stream_halo_of_the_wrong_length_is_named():
    """The Omega halo holds the last c - 1 keys and values; a shorter one was used as is."""
    memory = MEMORIES["mlp"]
    inputs = random_inputs(memory, length=5, window=3, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    _, state = scan(memory, inputs, state, chunk_size=2, omega_window=3)
    short = MemoryState(**{**state.__dict__, "halo_keys": state.halo_keys[:, :, :1]})
    with pytest.raises(ValueError, match=r"state.halo_keys must be \[2, 2, 2, 5\]"):
        scan(memory, inputs, short, chunk_size=2, omega_window=3)
    scan(memory, inputs, state, chunk_size=2, omega_window=3)  # the full halo continues
