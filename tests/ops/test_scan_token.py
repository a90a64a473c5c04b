"""The fused per-token form ("token", the decoding path) equals the per-token reference in
float64: outputs, final state and the gradients of every input, of the initial weights and
momentum and of a decay target; every update rule, Omega windows, clipping, both reads."""

import pytest
import torch
from test_inner_stability import target_of

from helpers import MEMORIES, check_parity, random_inputs, run_both, scan, setup_case

BOTH = ("reference", "token")


@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("length", [1, 7, 20])
@pytest.mark.parametrize("chunk_size", [1, 3, 8])
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_token_equals_reference(memory_id, chunk_size, length, read):
    memory, inputs, weights, momentum = setup_case(memory_id, length)
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, chunk_size=chunk_size, read=read
    )
    check_parity(results)


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize(
    "rule, window", [("momentum", 3), ("muon", 1), ("muon", 2), ("muon_chunk", 2)]
)
@pytest.mark.parametrize("memory_id", ["linear", "mlp", "gated-res", "affine"])
def test_token_equals_reference_for_every_rule_and_window(memory_id, rule, window, clip):
    memory, inputs, weights, momentum = setup_case(memory_id, length=11, window=window)
    for read in ("after", "before"):
        results = run_both(
            memory, inputs, weights, momentum, impls=BOTH, chunk_size=4, omega_window=window,
            update_rule=rule, read=read, max_grad_norm=clip,
        )  # fmt: skip
        check_parity(results, rtol=1e-8)  # NS5's fused form: the same sums in another order


@pytest.mark.parametrize("per_sample", [False, True])
@pytest.mark.parametrize("rule", ["momentum", "muon"])
def test_token_equals_reference_with_a_decay_target(rule, per_sample):
    memory, inputs, weights, momentum = setup_case("mlp", length=9, window=2)
    target = target_of(memory, heads=2, batch=2 if per_sample else None)
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, extra_leaves=target.values(),
        chunk_size=4, omega_window=2, update_rule=rule, decay_to=target,
    )  # fmt: skip
    check_parity(results, rtol=1e-8)
    assert results[1][2][-1].abs().max() > 0  # the target's gradient reaches it


@pytest.mark.parametrize("offset", [1, 5])
def test_token_continues_a_stream_from_mid_chunk(offset):
    memory, inputs, weights, momentum = setup_case("gated-res", length=9)
    prefix = random_inputs(memory, length=offset, heads=2)

    def advance(state):
        return scan(memory, prefix, state, chunk_size=6, impl="reference")[1]

    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, state_fn=advance, chunk_size=6
    )
    check_parity(results)


def test_decoding_token_by_token_equals_one_call():
    """A stream decoded one token at a time with "token" (what ``auto`` picks there) ends
    where one reference call over the whole stream ends."""
    memory, inputs, weights, _ = setup_case("mlp", length=13, window=2)
    state = memory.initial_state(weights, 2)
    reads = []
    with torch.no_grad():
        for t in range(13):
            piece = {n: None if x is None else x[:, t : t + 1] for n, x in inputs.items()}
            y, state = scan(memory, piece, state, chunk_size=4, omega_window=2, impl="token")
            reads.append(y)
        whole, final = scan(
            memory, inputs, memory.initial_state(weights, 2), chunk_size=4, omega_window=2,
            impl="reference",
        )  # fmt: skip
    torch.testing.assert_close(torch.cat(reads, dim=1), whole, rtol=1e-10, atol=1e-12)
    for name in final.weights:
        torch.testing.assert_close(state.weights[name], final.weights[name])


@pytest.mark.parametrize("rule", ["momentum", "muon"])
def test_token_equals_reference_with_a_heads_major_momentum_and_a_broadcast_gate(rule):
    """A caller's momentum stored [H, B]-major and a gate shared over the batch (stride 0):
    the product eta S takes that layout, and the fused add must not land in a copy."""
    memory, inputs, weights, momentum = setup_case("mlp", length=5)
    inputs["momentum"] = inputs["momentum"][:1].expand(2, -1, -1)
    momentum = {n: m.transpose(0, 1).contiguous().transpose(0, 1) for n, m in momentum.items()}
    check_parity(run_both(memory, inputs, weights, momentum, impls=BOTH, update_rule=rule))
