"""Streaming: any split of a stream, with the state carried, equals one call; and the chunked
form at C = 1 equals the fully sequential rule computed with autograd (an independent oracle)."""

import random
from dataclasses import replace

import pytest
import torch

from helpers import (
    MEMORIES,
    AffineMemory,
    assert_close,
    assert_states_close,
    fresh_state,
    random_inputs,
    random_weights,
    scan,
    slice_inputs,
)
from titans_atlas.ops import LinearMemory, MLPMemory, memory_scan


def splits(length, rng):
    """A few random splits plus one token at a time."""
    cuts = [sorted(rng.sample(range(1, length), rng.randint(1, 6))) for _ in range(3)]
    return [*cuts, list(range(1, length))]


@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("chunk_size", [1, 3, 8])
@pytest.mark.parametrize("memory_id", ["linear", "mlp3-silu-res", "gated"])
def test_pieces_equal_one_call(memory_id, chunk_size, read):
    rng = random.Random(memory_id + str(chunk_size) + read)
    memory, length = MEMORIES[memory_id], 19
    inputs = random_inputs(memory, length=length)
    weights = random_weights(memory, 2)
    start = fresh_state(memory, weights, 2)
    y_full, s_full = scan(memory, inputs, start, chunk_size=chunk_size, read=read, impl="chunk")
    for cuts in splits(length, rng):
        state, pieces = start, []
        for lo, hi in zip([0, *cuts], [*cuts, length]):
            impl = rng.choice(["chunk", "reference", "token", "auto"])
            y, state = scan(
                memory,
                slice_inputs(inputs, lo, hi),
                state,
                chunk_size=chunk_size,
                read=read,
                impl=impl,
            )
            pieces.append(y)
        assert_close(torch.cat(pieces, dim=1), y_full, name=f"y, cuts={cuts}")
        assert_states_close(state, s_full)


def test_empty_piece_leaves_the_state_unchanged():
    memory = MEMORIES["mlp"]
    inputs = random_inputs(memory, length=5)
    start = memory.initial_state(random_weights(memory, 2), 2)
    state = scan(memory, inputs, start, chunk_size=3)[1]
    y, after = scan(memory, slice_inputs(inputs, 0, 0), state, chunk_size=3, impl="chunk")
    assert y.shape == (2, 0, 2, 3)
    assert_states_close(after, state, rtol=0)


def sequential_oracle(memory, weights, inputs, chunk_size, read="after", window=1):
    """Titans eqs. 13-14 with the Omega rule and autograd for the surprise: an implementation
    sharing nothing with the library but the memory's forward. Tap j of token t is dropped
    when t - j < 0 (before the stream start)."""
    q, k, v = (inputs[n] for n in ("q", "k", "v"))
    batch, length = q.shape[:2]
    current = {n: w.expand(batch, *w.shape).clone() for n, w in weights.items()}
    mom = {n: torch.zeros_like(w) for n, w in current.items()}
    base, outputs = current, []
    for t in range(length):
        if t % chunk_size == 0:
            base = current
        leaves = {n: w.detach().requires_grad_() for n, w in base.items()}
        with torch.enable_grad():
            loss = 0.0
            for j in range(min(window, t + 1)):
                gamma = inputs["omega_gate"][:, t, :, j, None, None] if window > 1 else 1.0
                pred = memory.forward(leaves, k[:, t - j, :, None])
                loss = loss + (gamma * 0.5 * (pred - v[:, t - j, :, None]) ** 2).sum()
            grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
        theta, eta, alpha = (inputs[n][:, t, :, None, None] for n in ("lr", "momentum", "decay"))
        previous = current
        mom = {n: eta * mom[n] - theta * grads[n] for n in mom}
        current = {n: (1 - alpha) * current[n] + mom[n] for n in mom}
        read_weights = current if read == "after" else previous
        outputs.append(memory.forward(read_weights, q[:, t, :, None]))
    return torch.cat(outputs, dim=2).transpose(1, 2), current


@pytest.mark.parametrize("chunk_size", [1, 4])
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_chunked_form_equals_sequential_oracle(memory_id, chunk_size):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, length=11)
    weights = random_weights(memory, 2)
    y_oracle, w_oracle = sequential_oracle(memory, weights, inputs, chunk_size)
    y, state = scan(
        memory, inputs, memory.initial_state(weights, 2), chunk_size=chunk_size, impl="chunk"
    )
    assert_close(y, y_oracle, name="y")
    for name in weights:
        assert_close(state.weights[name], w_oracle[name], name=name)


@pytest.mark.parametrize("impl", ["chunk", "reference", "token"])
@pytest.mark.parametrize("chunk_size", [1, 4])
def test_omega_taps_before_the_stream_start_are_dropped(impl, chunk_size):
    """With f(W, 0) != 0 a tap on the zero halo has a non-zero gradient: both forms must drop
    the taps with t - j < 0, as the oracle does (a memory with f(W, 0) = 0 cannot tell)."""
    memory, window = AffineMemory(dim_in=5, dim_out=3), 3
    inputs = random_inputs(memory, length=9, window=window)
    weights = random_weights(memory, 2)
    y_oracle, w_oracle = sequential_oracle(memory, weights, inputs, chunk_size, window=window)
    state = memory.initial_state(weights, 2)
    kwargs = dict(chunk_size=chunk_size, omega_window=window, impl=impl)
    y, state = scan(memory, inputs, state, **kwargs)
    assert_close(y, y_oracle, name="y")
    for name in weights:
        assert_close(state.weights[name], w_oracle[name], name=name)


def test_memory_recalls_stored_pairs():
    """Write N key -> value pairs (lr > 0, no decay), then read with the keys as queries."""
    dim, pairs, heads = 16, 8, 2
    keys = torch.linalg.qr(torch.randn(heads, dim, dim))[0][:, :, :pairs].transpose(-1, -2)
    values = torch.randn(1, pairs, heads, dim)
    keys = keys.transpose(0, 1).unsqueeze(0)  # [1, N, H, D], orthonormal per head
    for memory in (LinearMemory(dim, dim), MLPMemory(dim, dim, expansion=4)):
        weights = memory.init_weights(heads)
        state = memory.initial_state(weights, 1)
        # one exact delta-rule write per key for the linear memory; SGD epochs for the MLP
        epochs, lr = (1, 1.0) if isinstance(memory, LinearMemory) else (30, 0.1)
        write = torch.ones(1, pairs, heads)
        for _ in range(epochs):
            _, state = memory_scan(
                memory, keys, keys, values, lr * write, 0 * write, 0 * write, state, chunk_size=1
            )
        silent = torch.zeros(1, pairs, heads)  # lr = 0: read without writing
        untrained, _ = memory_scan(
            memory,
            keys,
            keys,
            values,
            silent,
            silent,
            silent,
            memory.initial_state(weights, 1),
            chunk_size=1,
        )
        assert ((untrained - values) ** 2).mean() / (values**2).mean() > 0.5
        recalled, _ = memory_scan(
            memory, keys, keys, values, silent, silent, silent, state, chunk_size=1
        )
        error = ((recalled - values) ** 2).mean() / (values**2).mean()
        assert error < 1e-3, f"{type(memory).__name__}: relative recall error {error:.3f}"


def test_strong_decay_over_64k_tokens_stays_finite():
    """Gate products underflow inside chunks; masking before exp keeps 0/0 and inf*0 out."""
    memory, length = LinearMemory(4, 4), 65536
    q = k = torch.nn.functional.normalize(torch.randn(1, length, 1, 4), dim=-1)
    v = torch.randn(1, length, 1, 4)
    decay = torch.rand(1, length, 1).clamp(0.9, 1.0)
    decay[:, ::7] = 1.0  # total forgetting
    momentum = torch.rand(1, length, 1)
    momentum[:, ::5] = 0.0
    lr = torch.rand(1, length, 1)
    state = memory.initial_state(memory.init_weights(1), 1)
    y, state = memory_scan(memory, q, k, v, lr, momentum, decay, state, chunk_size=64)
    assert torch.isfinite(y).all() and torch.isfinite(state.weights["w1"]).all()


def test_gradients_stay_finite_at_gate_extremes():
    memory = MLPMemory(4, 4, expansion=2)
    weights = {n: w.requires_grad_() for n, w in memory.init_weights(1).items()}
    inputs = random_inputs(memory, batch=1, length=300, heads=1, dtype=torch.float32)
    inputs["decay"] = torch.where(torch.rand(1, 300, 1) < 0.3, 1.0, 0.999).requires_grad_()
    inputs["momentum"] = torch.where(torch.rand(1, 300, 1) < 0.3, 0.0, 1.0).requires_grad_()
    y, state = scan(memory, inputs, memory.initial_state(weights, 1), chunk_size=32)
    (y.sum() + state.weights["w1"].sum()).backward()
    for tensor in (inputs["decay"], inputs["momentum"], *weights.values()):
        assert torch.isfinite(tensor.grad).all()


@pytest.mark.parametrize("impl", ["chunk", "reference", "auto"])
def test_empty_call_on_a_chunk_boundary(impl):
    memory = MEMORIES["linear"]
    state = memory.initial_state(random_weights(memory, 2), 2)
    y, after = scan(memory, random_inputs(memory, length=0), state, chunk_size=4, impl=impl)
    assert y.shape == (2, 0, 2, 3) and after is state


@pytest.mark.parametrize("window", [1, 2, 4])
def test_a_fresh_stream_ignores_a_stale_halo(window):
    """Before the first token the halo is all zeros, whatever a position-0 state carries (here
    the halo of a window of 3, filled with noise): any window may start a stream."""
    memory = MEMORIES["affine"]  # f(W, 0) != 0: halo values would show
    inputs = random_inputs(memory, length=6, window=window)
    fresh = memory.initial_state(random_weights(memory, 2), 2)
    stale = replace(
        fresh,
        halo_keys=torch.randn(2, 2, 2, 5, dtype=torch.float64),
        halo_values=torch.randn(2, 2, 2, 3, dtype=torch.float64),
        omega_window=3,
    )
    for impl in ("chunk", "reference"):
        kwargs = dict(chunk_size=4, omega_window=window, impl=impl)
        y_stale, s_stale = scan(memory, inputs, stale, **kwargs)
        y_fresh, s_fresh = scan(memory, inputs, fresh, **kwargs)
        assert_close(y_stale, y_fresh, rtol=0)
        assert_states_close(s_stale, s_fresh, rtol=0)
