"""torch.compile: a compiled decode step is built once and stops recompiling after the first
steps of a stream (static ring KV caches, fixed-size memory states); compiled training and
decoding equal eager; a block's forward is one graph.

Tracing the memory scan is slow on a CPU (dynamo walks every small op of the chunked form),
so the default run keeps the cheap cases -- the eager backend, the sliding-window control --
and the memory models, and inductor (which compiles C++ with gcc), run under ``-m slow``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

import titans_atlas as ta
from titans_atlas.generation import compiled_decode_step, generate

WINDOW, CHUNK = 4, 3
TINY = {"vocab_size": 50, "dim": 16, "depth": 1, "num_heads": 2, "window": WINDOW}
# memory_scan skips its value checks (a host sync, a graph break) under compile, so every
# model's block is one graph
ONE_GRAPH_PER_BLOCK = set(ta.list_models())
slow = pytest.mark.slow


def tiny(name: str, **overrides) -> ta.LanguageModel:
    torch.manual_seed(0)
    return ta.create_model(name, **{**TINY, "chunk_size": CHUNK, **overrides}).eval()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "name", ["swa", *(pytest.param(n, marks=slow) for n in ("lmm", "mac", "mag", "atlas"))]
)
def test_a_compiled_decode_step_stops_recompiling_and_equals_eager(name):
    """After one period of every boundary (window, chunk) no step compiles anything, over
    100 more tokens; every step's logits equal the eager model's."""
    model, counter = tiny(name), CompileCounter()
    step = compiled_decode_step(model, backend=counter)
    assert compiled_decode_step(model, backend=counter) is step  # built once, then reused
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    warmup = 2 * math.lcm(WINDOW, CHUNK) + 2
    with torch.no_grad():
        _, state = model(ids)
        eager_state, token = state, ids[:, -1:]
        for i in range(warmup + 100):
            if i == warmup:
                frames = counter.frame_count
            logits, state = step(token, state)
            expected, eager_state = model(token, eager_state)
            torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
            token = logits[:, -1].argmax(-1, keepdim=True)
    assert counter.frame_count == frames, (
        f"{name}: {counter.frame_count - frames} compilations after {warmup} warm-up steps"
    )
    assert state.position == 5 + warmup + 100


@pytest.mark.parametrize(
    "name", ["swa", *(pytest.param(n, marks=slow) for n in ("lmm", "mac", "atlas-mal"))]
)
def test_compiled_blocks_train_like_eager(name):
    """Forward and backward through per-block compiled graphs (AOTAutograd traces the
    backward too) equal the eager model: logits and every parameter's gradient, in float64
    (in float32 the rounding of a gradient near zero beside one of 0.2 -- ATLAS's key
    convolution -- is already past an element-wise 1e-7)."""
    model = tiny(name, depth=2).double().train()
    ids = torch.randint(0, 50, (2, 13), generator=torch.Generator().manual_seed(2))
    logits, _ = model(ids)
    logits.square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.compile_blocks(backend="aot_eager", fullgraph=name in ONE_GRAPH_PER_BLOCK)
    compiled, _ = model(ids)
    compiled.square().mean().backward()
    torch.testing.assert_close(compiled, logits, rtol=1e-10, atol=1e-12)
    for pname, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[pname], rtol=1e-8, atol=1e-12, msg=pname)


@slow
@pytest.mark.parametrize("name", ["swa", "lmm", "mac"])
def test_inductor_training_step_and_decoding_equal_eager(name):
    """Inductor's generated kernels (not only the traced graph) agree with eager: decoding
    in float32, training in float64 (in float32 a gradient entry near zero beside the key
    convolution's 1e8 -- the zero key at a stream start, research/LOG.md, 10 -- rounds apart)."""
    model = tiny(name, depth=2)
    ids = torch.randint(0, 50, (2, 13), generator=torch.Generator().manual_seed(2))
    eager_out = generate(model, ids[:, :5], 24, greedy=True)
    assert torch.equal(generate(model, ids[:, :5], 24, greedy=True, compile=True), eager_out)
    model = model.double()
    logits, _ = model.train()(ids)
    logits.square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled, _ = model.compile_blocks(fullgraph=name in ONE_GRAPH_PER_BLOCK)(ids)
    compiled.square().mean().backward()
    # inductor's float64 CPU kernels for MAC's attention agree to ~3e-7 relative, not 1e-12
    torch.testing.assert_close(compiled, logits, rtol=1e-6, atol=1e-9)
    for pname, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[pname], rtol=1e-5, atol=1e-8, msg=pname)


@slow
@pytest.mark.parametrize("name", ["lmm", "mac", "atlas", "atlas++"])
def test_a_one_block_forward_is_one_graph(name):
    ids = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(3))
    explanation = torch._dynamo.explain(tiny(name, window=8, chunk_size=4))(ids)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), [
        str(r.reason).splitlines()[0] for r in explanation.break_reasons
    ]


def test_compile_blocks_keeps_parameter_names_and_checkpoints(tmp_path):
    model = tiny("swa")
    names = [n for n, _ in model.named_parameters()]
    model.compile_blocks(backend="eager")
    assert [n for n, _ in model.named_parameters()] == names
    model.save_pretrained(tmp_path)
    assert [n for n, _ in ta.load_model(tmp_path).named_parameters()] == names


@slow
@pytest.mark.parametrize("name", ["swa", "lmm", "mac"])
def test_no_recompilation_over_a_1000_token_decode(name):
    model, counter = tiny(name), CompileCounter()
    step = compiled_decode_step(model, backend=counter)
    with torch.no_grad():
        _, state = model(torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(1)))
        token = torch.zeros(1, 1, dtype=torch.long)
        for i in range(1000 + 2 * math.lcm(WINDOW, CHUNK)):
            if i == 2 * math.lcm(WINDOW, CHUNK):
                frames = counter.frame_count
            logits, state = step(token, state)
            token = logits[:, -1].argmax(-1, keepdim=True)
    assert counter.frame_count == frames, f"{name}: recompiled during a 1,000-token decode"


def _refuse(*args, **kwargs):
    raise AssertionError("the hot path read a tensor's value (a host-device sync on a GPU)")


@pytest.mark.parametrize("name", ta.list_models())
def test_validate_off_reads_no_tensor_value(name, monkeypatch):
    """``set_runtime(validate=False)`` covers the memory layers' value checks too: a
    training forward and backward and a streamed continuation never turn a tensor into a
    Python value; with the default on, the checks do read values."""
    model = tiny(name).train().set_runtime(validate=False)
    ids = torch.randint(0, 50, (2, 2 * CHUNK + 1), generator=torch.Generator().manual_seed(0))

    def refuse_reads():
        for method in ("__bool__", "item", "tolist", "__int__", "__float__"):
            monkeypatch.setattr(torch.Tensor, method, _refuse)

    refuse_reads()
    logits, state = model(ids[:, :4])
    more, _ = model(ids[:, 4:], state)
    (logits.sum() + more.sum()).backward()
    monkeypatch.undo()
    model.set_runtime(validate=True)
    refuse_reads()
    with pytest.raises(AssertionError, match="host-device"):
        model(ids)
