"""CUDA: the chunked form on the GPU equals the CPU reference (run with ``pytest -m gpu``)."""

import pytest
import torch

import titans_atlas as ta
from helpers import MEMORIES, assert_close, assert_states_close, random_inputs, random_weights, scan

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def on(device, inputs):
    return {n: None if x is None else x.to(device) for n, x in inputs.items()}


@pytest.mark.parametrize("muon", [False, True])
@pytest.mark.parametrize("memory_id", ["mlp", "gated-res"])
def test_chunk_on_cuda_equals_reference_on_cpu(memory_id, muon):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, length=37, window=3)
    weights = random_weights(memory, 2)
    y_ref, s_ref = scan(
        memory,
        inputs,
        memory.initial_state(weights, 2),
        chunk_size=8,
        omega_window=3,
        muon=muon,
        impl="reference",
    )
    cuda_weights = {n: w.cuda() for n, w in weights.items()}
    y, s = scan(
        memory,
        on("cuda", inputs),
        memory.initial_state(cuda_weights, 2),
        chunk_size=8,
        omega_window=3,
        muon=muon,
        impl="chunk",
    )
    assert_close(y.cpu(), y_ref)
    assert_states_close(s.map_tensors(torch.Tensor.cpu), s_ref)


def test_model_streams_on_cuda_under_bf16_autocast():
    torch.manual_seed(0)
    model = ta.create_model(
        "atlas-mag", vocab_size=50, dim=32, depth=2, num_heads=2, window=8, chunk_size=4
    ).cuda()
    ids = torch.randint(0, 50, (2, 21), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        whole, state = model(ids)
        first, streamed = model(ids[:, :10])
        rest, _ = model(ids[:, 10:], streamed)
    memory = state.blocks[0]["memory"].memory
    assert all(w.dtype == torch.float32 for w in memory.weights.values())
    assert (torch.cat([first, rest], 1).float() - whole.float()).abs().max() < 0.05
