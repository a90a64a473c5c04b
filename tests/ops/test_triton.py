"""The fused Triton kernels (ops/triton, docs/gpu.md) equal the per-token reference: outputs,
final state and the gradients of every input (q, k, v, lr, momentum, decay, omega gate,
initial weights, initial momentum).

Without CUDA the kernels run in Triton's CPU interpreter: TRITON_INTERPRET=1 is set by
tests/conftest.py, before anything imports triton (Triton reads it at import). The interpreter
evaluates ``tl.dot`` with numpy in the operands' dtype, float64 included, so these tests hold
the torch chunked form's float64 tolerance (1e-9) on the CPU, and float32 runs are compared
with 1e-4 as in test_scan_parity. With CUDA the same tests run compiled on the GPU (float64
``tl.dot`` needs sm80 or newer), and the ``gpu``-marked ones below add real widths. The
interpreter costs ~0.1 s per chunk and (batch, head), so the default cases are a few chunks
of one or two heads; the wide sweep is marked slow.
"""

import subprocess
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("triton")

from test_inner_stability import CLIP, clipped_fraction, target_of

import titans_atlas.ops.scan as scan_module
from helpers import (
    assert_close,
    assert_states_close,
    check_parity,
    fresh_state,
    gradients,
    probe_loss,
    random_inputs,
    random_weights,
    run_both,
    scan,
    slice_inputs,
)
from titans_atlas.ops import GatedMLPMemory, LinearMemory, MLPMemory
from titans_atlas.ops.triton import autograd as fused_autograd
from titans_atlas.ops.triton import memory_scan_triton
from titans_atlas.ops.triton import scan as triton_scan

DEVICE = "cpu" if triton_scan.interpreting() else "cuda"
MEMORIES = {
    "linear": LinearMemory(dim_in=5, dim_out=3),
    "mlp": MLPMemory(dim_in=5, dim_out=3, expansion=2),
    "mlp-silu-res": MLPMemory(dim_in=5, dim_out=5, expansion=2, activation="silu", residual=True),
}
BOTH = ("reference", "triton")
SRC = Path(__file__).resolve().parents[2] / "src"


def case(memory_id, length, window=1, batch=1, heads=2, dtype=torch.float64):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, batch, length, heads, window, dtype)
    weights = random_weights(memory, heads, dtype)
    momentum = fresh_state(memory, weights, batch).momentum
    move = lambda d: {n: None if x is None else x.to(DEVICE) for n, x in d.items()}  # noqa: E731
    return memory, move(inputs), move(weights), move(momentum)


def check_streamed_in_pieces(memory, inputs, weights, momentum, extra_leaves=(), **options):
    """Pieces of 3, 1 and 6 tokens through the kernels, the state (base, halo, position)
    carried, equal one reference call: outputs, final state and the gradients of every leaf
    (inputs, initial weights and momentum, ``extra_leaves``), through the carried state too."""
    leaves = [x for x in inputs.values() if x is not None]
    leaves += [*weights.values(), *momentum.values(), *extra_leaves]
    for leaf in leaves:
        leaf.requires_grad_(True)

    def start():
        return replace(memory.initial_state(weights, 1), momentum=dict(momentum))

    y_ref, s_ref = scan(memory, inputs, start(), impl="reference", **options)
    state, pieces, edge = start(), [], 0
    for size in (3, 1, 6):
        y, state = scan(memory, slice_inputs(inputs, edge, edge + size), state, impl="triton",
                        **options)  # fmt: skip
        pieces.append(y)
        edge += size
    y_tri = torch.cat(pieces, dim=1)
    assert_close(y_tri, y_ref)
    assert_states_close(state, s_ref)
    grads_ref = gradients(probe_loss(y_ref, s_ref), leaves)
    grads_tri = gradients(probe_loss(y_tri, state), leaves)
    for i, (a, e) in enumerate(zip(grads_tri, grads_ref)):
        assert_close(a, e, name=f"grad {i}")


@pytest.mark.parametrize(
    "memory_id, length, chunk_size, read, window",
    [
        ("linear", 1, 3, "after", 1),
        ("linear", 7, 3, "before", 2),
        ("linear", 20, 8, "after", 3),
        ("mlp", 7, 4, "after", 1),
        ("mlp-silu-res", 7, 3, "before", 3),
    ],
)
def test_triton_equals_reference(memory_id, length, chunk_size, read, window):
    memory, inputs, weights, momentum = case(memory_id, length, window)
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, chunk_size=chunk_size, read=read,
        omega_window=window,
    )  # fmt: skip
    check_parity(results)


@pytest.mark.parametrize(
    "memory_id, length, chunk_size, read, window",
    [
        ("linear", 7, 3, "before", 2),
        ("mlp", 9, 4, "before", 2),
        ("mlp-silu-res", 7, 3, "after", 3),
    ],
)
def test_clipped_triton_equals_reference(memory_id, length, chunk_size, read, window):
    """max_grad_norm in the kernels: per token and weight, binding on some tokens only (the
    clip's share of every gradient included)."""
    memory, inputs, weights, momentum = case(memory_id, length, window)
    fraction = clipped_fraction(memory, {n: x.cpu() for n, x in inputs.items() if x is not None},
                                {n: w.cpu() for n, w in weights.items()}, CLIP)  # fmt: skip
    assert 0.05 < fraction < 0.95
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, chunk_size=chunk_size, read=read,
        omega_window=window, max_grad_norm=CLIP,
    )  # fmt: skip
    check_parity(results)


def test_clipped_streaming_in_pieces_with_several_hidden_tiles(monkeypatch):
    """The clip's norms over hidden tiles of 16 (16 + 16 + 8), and pieces of 3, 1 and 6."""
    monkeypatch.setattr(fused_autograd, "HIDDEN_TILE", 16)
    memory = MLPMemory(dim_in=5, dim_out=3, expansion=8)
    monkeypatch.setitem(MEMORIES, "wide", memory)
    _, inputs, weights, momentum = case("wide", length=10, window=2, heads=1)
    check_streamed_in_pieces(memory, inputs, weights, momentum, chunk_size=4, omega_window=2,
                             max_grad_norm=CLIP)  # fmt: skip


def test_several_hidden_tiles_with_a_ragged_last_tile(monkeypatch):
    """Hidden width 40 in tiles of 16 (16 + 16 + 8; the default tile covers it in one)."""
    monkeypatch.setattr(fused_autograd, "HIDDEN_TILE", 16)
    monkeypatch.setitem(MEMORIES, "wide", MLPMemory(dim_in=5, dim_out=3, expansion=8))
    memory, inputs, weights, momentum = case("wide", length=9, window=2, heads=1)
    check_parity(run_both(memory, inputs, weights, momentum, impls=BOTH, chunk_size=4,
                          omega_window=2))  # fmt: skip


@pytest.mark.parametrize("memory_id", ["linear", "mlp"])
def test_call_starting_inside_a_chunk(memory_id):
    """The first chunk's base weights differ from its start weights (and get gradients)."""
    memory, inputs, weights, momentum = case(memory_id, length=11, window=2)
    prefix = {n: None if x is None else x.to(DEVICE) for n, x in
              random_inputs(memory, 1, 3, 2, 2).items()}  # fmt: skip

    def advance(state):
        return scan(memory, prefix, state, chunk_size=5, omega_window=2, impl="reference")[1]

    results = run_both(memory, inputs, weights, momentum, state_fn=advance, impls=BOTH,
                       chunk_size=5, omega_window=2)  # fmt: skip
    check_parity(results)


@pytest.mark.parametrize("memory_id", ["linear", "mlp"])
def test_streaming_in_pieces_equals_one_reference_call(memory_id):
    """Pieces of 3, 1 and 6 tokens with the state carried (base, halo, position) give the
    one-call outputs, state and gradients -- through the carried state, too."""
    memory, inputs, weights, momentum = case(memory_id, length=10, window=2)
    check_streamed_in_pieces(memory, inputs, weights, momentum, chunk_size=4, omega_window=2)


@pytest.mark.parametrize("memory_id", ["linear", "mlp"])
def test_gradients_at_the_gate_bounds(memory_id):
    """eta = 0 and alpha = 1 are legal; the products they enter keep their derivatives."""
    memory, inputs, weights, momentum = case(memory_id, length=9, window=2)
    inputs["momentum"][:, 3] = 0.0
    inputs["decay"][:, 5] = 1.0
    check_parity(run_both(memory, inputs, weights, momentum, impls=BOTH, chunk_size=4,
                          omega_window=2))  # fmt: skip


@pytest.mark.parametrize("memory_id", ["linear", "mlp-silu-res"])
def test_float32_is_within_float32_precision(memory_id):
    memory, inputs, weights, momentum = case(memory_id, length=21, window=2)
    state = replace(memory.initial_state(weights, 1), momentum=dict(momentum))
    y_ref, s_ref = scan(memory, inputs, state, chunk_size=8, omega_window=2, impl="reference")
    as32 = lambda d: {n: None if x is None else x.float() for n, x in d.items()}  # noqa: E731
    state32 = replace(memory.initial_state(as32(weights), 1), momentum=as32(momentum))
    y, s = scan(memory, as32(inputs), state32, chunk_size=8, omega_window=2, impl="triton")
    assert y.dtype == torch.float32
    assert_close(y.double(), y_ref, rtol=1e-4)
    assert_states_close(s.map_tensors(torch.Tensor.double), s_ref, rtol=1e-4)


@pytest.mark.parametrize("memory_id", ["linear", "mlp"])
def test_inference_without_saved_states_gives_the_same_result(memory_id):
    """Without a gradient the forward keeps two state slots instead of one per chunk."""
    memory, inputs, weights, momentum = case(memory_id, length=13, window=1)
    state = replace(memory.initial_state(weights, 1), momentum=dict(momentum))
    with torch.no_grad():
        y_free, s_free = scan(memory, inputs, state, chunk_size=3, impl="triton")
    weights = {n: w.requires_grad_(True) for n, w in weights.items()}
    state = replace(memory.initial_state(weights, 1), momentum=dict(momentum))
    y, s = scan(memory, inputs, state, chunk_size=3, impl="triton")
    assert y.requires_grad
    assert_close(y_free, y.detach(), rtol=1e-12)
    assert_states_close(s_free, s, rtol=1e-12)
    for name in s.base:  # 13 tokens in chunks of 3: the stream stands inside a chunk
        assert_close(s_free.base[name], s.base[name].detach(), rtol=1e-12)


@pytest.mark.parametrize(
    "memory, option, match",
    [
        (GatedMLPMemory(dim_in=5, dim_out=3), {}, "memory=GatedMLPMemory"),
        (MLPMemory(dim_in=5, dim_out=3, depth=3), {}, "depth=3"),
    ],
)
def test_unsupported_options_raise_naming_the_option(memory, option, match):
    inputs = random_inputs(memory, 1, 4, 2)
    state = memory.initial_state(random_weights(memory, 2), 1)
    with pytest.raises(ValueError, match=match):
        scan(memory, inputs, state, chunk_size=2, impl="triton", **option)


@pytest.mark.parametrize(
    "memory_id, length, chunk_size, read, per_sample, clip",
    [
        ("linear", 11, 4, "after", False, None),
        ("linear", 7, 3, "before", True, CLIP),
        ("mlp", 11, 4, "after", True, None),
        ("mlp", 9, 4, "before", False, CLIP),
        ("mlp-silu-res", 7, 3, "before", True, None),
    ],
)
def test_decay_to_a_target_equals_reference(memory_id, length, chunk_size, read, per_sample, clip):
    """decay_to (docs/memory.md, section 10): the MLP kernels add (1 - beta) A to every read
    and chunk end, the linear memory runs the zero-target kernel on W - A; the target's
    gradient (per head or per sample) included."""
    memory, inputs, weights, momentum = case(memory_id, length, window=2, batch=2)
    target = {n: w.to(DEVICE) for n, w in
              target_of(memory, heads=2, batch=2 if per_sample else None).items()}  # fmt: skip
    results = run_both(
        memory, inputs, weights, momentum, impls=BOTH, extra_leaves=target.values(),
        chunk_size=chunk_size, read=read, omega_window=2, max_grad_norm=clip, decay_to=target,
    )  # fmt: skip
    check_parity(results)
    assert results[1][2][-1].abs().max() > 0  # the target's gradient is not trivially 0


def test_decay_to_streamed_in_pieces_over_several_hidden_tiles(monkeypatch):
    """The target's gradient summed over chunks and hidden tiles (16 + 16 + 8), through a
    stream cut into pieces of 3, 1 and 6 (the carried base inside a chunk)."""
    monkeypatch.setattr(fused_autograd, "HIDDEN_TILE", 16)
    memory = MLPMemory(dim_in=5, dim_out=3, expansion=8)
    monkeypatch.setitem(MEMORIES, "wide", memory)
    _, inputs, weights, momentum = case("wide", length=10, window=1, heads=1)
    target = {n: w.to(DEVICE) for n, w in target_of(memory, heads=1).items()}
    check_streamed_in_pieces(memory, inputs, weights, momentum, target.values(), chunk_size=4,
                             max_grad_norm=CLIP, decay_to=target)  # fmt: skip


class _TooLargeForTheGPU:
    """A kernel whose launch fails as the MLP kernels' do on an H200 at head 64 x hidden
    256 (docs/gpu.md): more shared memory than an sm_90 block may have."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.runtime.errors import OutOfResources

            raise OutOfResources(360_448, 232_448, "shared memory")

        return launch


@pytest.mark.parametrize(
    "memory_id, kernel, name",
    [
        ("mlp", "mlp_forward_kernel", "MLP forward"),
        ("mlp", "mlp_backward_kernel", "MLP backward"),
        ("linear", "linear_backward_kernel", "linear backward"),
    ],
)
def test_a_kernel_too_large_for_the_gpu_raises_naming_the_torch_form(
    memory_id, kernel, name, monkeypatch
):
    monkeypatch.setattr(fused_autograd, kernel, _TooLargeForTheGPU())
    memory, inputs, weights, momentum = case(memory_id, length=7)
    widths = r"Dk=5, Dv=3, Dh=10" if memory_id == "mlp" else r"Dk=5, Dv=3"
    match = (
        rf"impl='triton' cannot run the {name} kernel at {widths} on this GPU: it needs "
        r"360448 of shared memory, the device allows 232448\. Use impl='chunk'"
    )
    with pytest.raises(ValueError, match=match):
        run_both(memory, inputs, weights, momentum, impls=("triton",), chunk_size=4)


def test_an_ns5_too_large_for_the_gpu_raises_naming_the_torch_form(monkeypatch):
    from titans_atlas.ops.triton import newton_schulz as fused_ns5

    monkeypatch.setattr(fused_ns5, "ns5_forward_kernel", _TooLargeForTheGPU())
    x = torch.randn(3, 4, 8, dtype=torch.float64, device=DEVICE)
    with pytest.raises(
        ValueError, match=r"cannot run the NS5 forward kernel at 4 x 8 .*impl='chunk'"
    ):
        fused_ns5.newton_schulz5_triton(x)


def test_a_missing_triton_package_raises_naming_the_extra(monkeypatch):
    real_find_spec = scan_module.importlib.util.find_spec
    monkeypatch.setattr(
        scan_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "triton" else real_find_spec(name, *a),
    )
    memory = MEMORIES["linear"]
    state = memory.initial_state(random_weights(memory, 2), 1)
    with pytest.raises(ValueError, match=r"impl='triton' needs the triton package.*\[triton\]"):
        scan(memory, random_inputs(memory, 1, 4, 2), state, chunk_size=2, impl="triton")


def test_core_import_does_not_import_triton():
    """The kernels are an extra: importing the library (and running a scan) leaves
    titans_atlas.ops.triton and triton itself unimported; impl="triton" imports them."""
    code = (
        "import sys, torch; import titans_atlas as ta, titans_atlas.generation, titans_atlas.cli; "
        "m = ta.MLPMemory(dim_in=4, dim_out=4); s = m.initial_state(m.init_weights(1), 1); "
        "x = torch.randn(1, 3, 1, 4); g = torch.rand(1, 3, 1); "
        "ta.memory_scan(m, x, x, x, g, g, g, s, chunk_size=2, impl='chunk'); "
        "bad = sorted(n for n in sys.modules if n == 'triton' or 'ops.triton' in n); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=SRC if SRC.is_dir() else None)


def test_cpu_tensors_without_the_interpreter_raise(monkeypatch):
    monkeypatch.setattr(triton_scan, "interpreting", lambda: False)
    monkeypatch.setattr(triton_scan, "interpreter_requested", lambda: False)
    memory = MEMORIES["linear"]
    state = memory.initial_state(random_weights(memory, 2), 1)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        scan(memory, random_inputs(memory, 1, 4, 2), state, chunk_size=2, impl="triton")


@pytest.mark.parametrize("decay_target", ["zero", "init"])
def test_a_model_runs_the_kernels_through_set_runtime(monkeypatch, decay_target):
    """``set_runtime(memory_impl="triton")`` reaches every memory layer: the logits, the
    carried state and the parameter gradients equal the torch chunked form's (also with the
    training presets' decay toward the learned initial weights)."""
    import titans_atlas as ta
    import titans_atlas.ops.triton as triton_package

    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return memory_scan_triton(*args, **kwargs)

    monkeypatch.setattr(triton_package, "memory_scan_triton", spy)

    model = ta.create_model("lmm", vocab_size=32, dim=8, depth=1, num_heads=1, chunk_size=4,
                            decay_target=decay_target)  # fmt: skip
    model = model.double().to(DEVICE)
    ids = torch.randint(0, 32, (1, 10), device=DEVICE)
    results = []
    for impl in ("chunk", "triton"):
        model.set_runtime(memory_impl=impl)
        model.zero_grad()
        logits, state = model(ids)
        logits.square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((logits, state.blocks[0].memory, grads))
    (y_chunk, s_chunk, g_chunk), (y_tri, s_tri, g_tri) = results
    assert len(calls) == 1
    assert_close(y_tri, y_chunk, name="logits")
    assert_states_close(s_tri, s_chunk)
    for i, (a, e) in enumerate(zip(g_tri, g_chunk)):
        assert_close(a, e, name=f"grad {i}")


@pytest.mark.slow
@pytest.mark.parametrize("read", ["after", "before"])
@pytest.mark.parametrize("length", [1, 7, 63, 100])
@pytest.mark.parametrize("chunk_size", [1, 8, 16])
@pytest.mark.parametrize("memory_id", list(MEMORIES))
def test_triton_equals_reference_sweep(memory_id, chunk_size, length, read):
    memory, inputs, weights, momentum = case(memory_id, length, window=3, batch=2)
    check_parity(run_both(memory, inputs, weights, momentum, impls=BOTH, chunk_size=chunk_size,
                          read=read, omega_window=3))  # fmt: skip


class _CountOps(TorchDispatchMode):
    """Counts the aten operations that compute (views excluded): one kernel each on a GPU."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("anchored", [False, True])
@pytest.mark.parametrize("memory_id", ["linear", "mlp"])
def test_operations_do_not_grow_with_the_number_of_chunks(memory_id, anchored):
    """The chunk loop is one kernel each way: 2 or 4 chunks cost the same operations (the
    torch chunked form adds ~50 forward and ~140 backward per chunk for the MLP), with or
    without a decay target."""
    counts = []
    for length in (8, 16):
        memory, inputs, weights, momentum = case(memory_id, length, heads=1)
        target = {n: w + 0.5 for n, w in weights.items()} if anchored else None
        leaves = [*inputs.values(), *weights.values()]
        for leaf in (x for x in leaves if x is not None):
            leaf.requires_grad_(True)
        state = replace(memory.initial_state(weights, 1), momentum=dict(momentum))
        with _CountOps() as forward:
            y, state = scan(memory, inputs, state, chunk_size=4, impl="triton", decay_to=target)
        with _CountOps() as backward:
            probe_loss(y, state).backward()
        counts.append((forward.count, backward.count))
    assert counts[0] == counts[1]


def _real_width_case(memory, window, anchored=False):
    inputs = random_inputs(memory, 2, 200, 2, window, torch.float64)
    weights = random_weights(memory, 2, torch.float64)
    momentum = fresh_state(memory, weights, 2).momentum
    target = {n: w + 0.1 * torch.randn_like(w) for n, w in weights.items()} if anchored else {}
    leaves = [*inputs.values(), *weights.values(), *momentum.values(), *target.values()]
    leaves = [x for x in leaves if x is not None]
    for leaf in leaves:
        leaf.requires_grad_(True)

    def run(impl, device, dtype, **options):
        cast = lambda d: {n: x if x is None else x.to(device, dtype) for n, x in d.items()}  # noqa: E731
        state = replace(memory.initial_state(cast(weights), 2), momentum=cast(momentum))
        options |= dict(chunk_size=64, omega_window=window, decay_to=cast(target) or None)
        y, final = scan(memory, cast(inputs), state, impl=impl, **options)
        return y, final, gradients(probe_loss(y.cpu().double(), final.map_tensors(
            lambda x: x.cpu().double())), leaves)  # fmt: skip

    return run


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (compiled kernels)")
@pytest.mark.parametrize("anchored", [False, True])
@pytest.mark.parametrize("window", [1, 4])
@pytest.mark.parametrize("precision, rtol", [("ieee", 1e-3), ("tf32x3", 1e-3), ("tf32", 3e-2)])
@pytest.mark.parametrize(
    "memory",
    [
        LinearMemory(dim_in=64, dim_out=64),
        pytest.param(
            MLPMemory(dim_in=64, dim_out=64, expansion=4),
            marks=pytest.mark.xfail(
                raises=ValueError,
                reason="the MLP kernels need more shared memory than sm_90 has at these "
                "widths (tests/ops/test_triton_compiles.py, docs/gpu.md)",
            ),
        ),
    ],
    ids=["linear", "mlp"],
)
def test_cuda_float32_at_real_widths_matches_float64(
    memory, window, precision, rtol, anchored, monkeypatch
):
    """Head width 64, hidden 256, chunk 64, 200 tokens, with and without a decay target:
    compiled fp32 kernels against the float64 torch chunked form (itself equal to the
    reference to 1e-9)."""
    fused = partial(memory_scan_triton, precision=precision)
    monkeypatch.setitem(scan_module.IMPLS, "triton", fused)
    run = _real_width_case(memory, window, anchored)
    expected = run("chunk", "cpu", torch.float64)
    actual = run("triton", "cuda", torch.float32)
    assert_close(actual[0].cpu().double(), expected[0], rtol, "y")
    assert_states_close(actual[1].map_tensors(lambda x: x.cpu().double()), expected[1], rtol)
    for i, (a, e) in enumerate(zip(actual[2], expected[2])):
        assert_close(a, e, rtol, f"grad {i}")


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (compiled kernels)")
def test_cuda_kernel_launches_do_not_grow_with_length():
    from torch.profiler import ProfilerActivity, profile

    memory = MLPMemory(dim_in=64, dim_out=64, expansion=4)
    weights = {n: w.cuda() for n, w in memory.init_weights(4).items()}
    kernels = []
    for length in (256, 1024):
        inputs = {n: x if x is None else x.cuda() for n, x in
                  random_inputs(memory, 2, length, 4, 1, torch.float32).items()}  # fmt: skip
        state = memory.initial_state(weights, 2)
        scan(memory, inputs, state, chunk_size=64, impl="triton")  # compile outside the count
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            scan(memory, inputs, state, chunk_size=64, impl="triton")
            torch.cuda.synchronize()
        kernels.append(sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events()))
    assert kernels[0] == kernels[1] < 200
