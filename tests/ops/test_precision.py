"""Mixed precision: the memory state stays fp32 under bf16 autocast, and results stay close
to the fp32 run (bf16 rounding only enters through the inputs)."""

import torch

import titans_atlas as ta
from helpers import MEMORIES, random_inputs, scan


def test_state_stays_fp32_under_bf16_autocast():
    memory = MEMORIES["mlp"]
    inputs = random_inputs(memory, length=20, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    y32, _ = scan(memory, inputs, state, chunk_size=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = scan(memory, inputs, state, chunk_size=8)
    assert all(w.dtype == torch.float32 for w in [*s.weights.values(), *s.momentum.values()])
    assert y.dtype == torch.float32  # y comes back in the input dtype
    torch.testing.assert_close(y, y32, rtol=0, atol=1e-6)  # nothing ran in bf16


def test_bf16_inputs_compute_in_the_state_precision():
    memory = MEMORIES["gated"]
    inputs = random_inputs(memory, length=20, dtype=torch.float32)
    state = memory.initial_state(memory.init_weights(2), 2)
    y32, _ = scan(memory, inputs, state, chunk_size=8)
    low = {n: None if x is None else x.bfloat16() for n, x in inputs.items()}
    y, s = scan(memory, low, state, chunk_size=8)
    assert y.dtype == torch.bfloat16
    assert all(w.dtype == torch.float32 for w in s.weights.values())
    assert (y.float() - y32).abs().max() < 0.05 * y32.abs().max()


def test_model_under_bf16_autocast_keeps_an_fp32_memory_and_streams():
    torch.manual_seed(0)
    model = ta.create_model(
        "mag", vocab_size=50, dim=32, depth=2, num_heads=2, window=8, chunk_size=4
    )
    ids = torch.randint(0, 50, (2, 17))
    with torch.no_grad():
        reference, _ = model(ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, state = model(ids)
            first, streamed = model(ids[:, :9])
            rest, _ = model(ids[:, 9:], streamed)
    memory = state.blocks[0]["memory"].memory
    assert all(w.dtype == torch.float32 for w in memory.weights.values())
    assert torch.isfinite(logits).all()
    assert (logits.float() - reference).abs().max() < 0.1 * reference.abs().max()
    assert (torch.cat([first, rest], 1).float() - logits.float()).abs().max() < 0.05
