"""Shared test helpers: random memory inputs, running a scan, comparing results; a saved
model read back as an older format; a small bAbI story on disk."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from titans_atlas.layers.memory_config import FORMAT_7_FIELDS, FORMAT_8_FIELDS
from titans_atlas.models.config import MAC_FIELDS, MAC_GATE_FIELDS, MAG_FIELDS
from titans_atlas.models.pretrained import CheckpointError, load_model
from titans_atlas.ops import GatedMLPMemory, LinearMemory, MemoryModel, MLPMemory, memory_scan
from titans_atlas.ops.checks import CountSyncs  # noqa: F401  (the tests import it from here)


@dataclass(frozen=True)
class AffineMemory(MemoryModel):
    """f(W, x) = x W1 + b, the bias a 1 x Dv weight read through a constant 1 (a test memory).

    Every library memory has f(W, 0) = 0, so a zero key and value -- the Omega halo before the
    stream start -- has zero gradient, and dropping those taps is invisible. Here f(W, 0) = b,
    so the gradient of a tap at the zero halo is b^T b-shaped and not zero: a scan that forgets
    to drop taps before the stream start gives a different result.
    """

    dim_in: int
    dim_out: int

    def weight_shapes(self) -> dict[str, tuple[int, int]]:
        return {"w1": (self.dim_in, self.dim_out), "bias": (1, self.dim_out)}

    def forward_with(self, linear, x: torch.Tensor) -> torch.Tensor:
        return linear("w1", x) + linear("bias", x.new_ones(*x.shape[:-1], 1))

    def grad_factors(self, weights, k: torch.Tensor, v: torch.Tensor):
        delta = k @ weights["w1"] + weights["bias"] - v  # bias [B, H, 1, Dv] over the tokens
        return {"w1": (k, delta), "bias": (k.new_ones(*k.shape[:-1], 1), delta)}


MEMORIES = {
    "linear": LinearMemory(dim_in=5, dim_out=3),
    "mlp": MLPMemory(dim_in=5, dim_out=3, expansion=2),
    "mlp3-silu-res": MLPMemory(
        dim_in=5, dim_out=5, expansion=1.6, depth=3, activation="silu", residual=True
    ),
    "gated": GatedMLPMemory(dim_in=5, dim_out=3, expansion=2),
    "gated-res": GatedMLPMemory(dim_in=5, dim_out=5, expansion=2, residual=True),
    "affine": AffineMemory(dim_in=5, dim_out=3),  # f(W, 0) != 0
}
INPUT_NAMES = ("q", "k", "v", "lr", "momentum", "decay", "omega_gate")


def random_weights(memory: MemoryModel, heads: int, dtype=torch.float64) -> dict:
    """Initial weights with a random perturbation (the linear memory starts at zero)."""
    weights = memory.init_weights(heads, dtype=dtype)
    return {n: w + 0.3 * torch.randn_like(w) for n, w in weights.items()}


def random_inputs(memory, batch=2, length=7, heads=2, window=1, dtype=torch.float64) -> dict:
    """Unit-norm queries/keys (as the memory layer feeds them), random gates in range."""
    shape = (batch, length, heads)
    inputs = {
        "q": F.normalize(torch.randn(*shape, memory.dim_in, dtype=dtype), dim=-1),
        "k": F.normalize(torch.randn(*shape, memory.dim_in, dtype=dtype), dim=-1),
        "v": torch.randn(*shape, memory.dim_out, dtype=dtype),
        "lr": 0.3 * torch.rand(*shape, dtype=dtype),
        "momentum": 0.9 * torch.rand(*shape, dtype=dtype),
        "decay": 0.1 * torch.rand(*shape, dtype=dtype),
        "omega_gate": torch.rand(*shape, window, dtype=dtype) if window > 1 else None,
    }
    return inputs


def fresh_state(memory, weights, batch, momentum_scale=0.1):
    """A new stream with a random non-zero initial momentum."""
    state = memory.initial_state(weights, batch)
    state.momentum = {n: momentum_scale * torch.randn_like(m) for n, m in state.momentum.items()}
    return state


def scan(memory, inputs, state, **kwargs):
    args = {n: inputs[n] for n in INPUT_NAMES if n != "omega_gate"}
    return memory_scan(memory, state=state, omega_gate=inputs.get("omega_gate"), **args, **kwargs)


def probe_loss(y, state, seed=1):
    """A random linear functional of the outputs and the final weights and momentum."""
    gen = torch.Generator().manual_seed(seed)
    # drawn on the CPU (the generator's device) and moved, so CUDA runs see the same probe
    probe = lambda x: (x * torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device)).sum()  # noqa: E731
    loss = probe(y)
    for name in sorted(state.weights):
        loss = loss + probe(state.weights[name]) + probe(state.momentum[name])
    return loss


def gradients(loss, tensors):
    """Gradients of ``loss`` w.r.t. ``tensors`` (zeros where a tensor is unused)."""
    grads = torch.autograd.grad(loss, tensors, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, tensors)]


def assert_close(actual, expected, rtol=1e-9, name=""):
    """Relative-to-scale closeness: max |a - e| <= rtol * max(1, max |e|)."""
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    err = (actual - expected).abs().max().item() if expected.numel() else 0.0
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    assert err <= rtol * scale, f"{name}: max abs error {err:.3e} > {rtol:.0e} x {scale:.3e}"


def assert_states_close(actual, expected, rtol=1e-9):
    assert actual.position == expected.position
    for name in expected.weights:
        assert_close(actual.weights[name], expected.weights[name], rtol, f"weights[{name}]")
        assert_close(actual.momentum[name], expected.momentum[name], rtol, f"momentum[{name}]")


def run_both(
    memory,
    inputs,
    weights,
    init_momentum,
    state_fn=None,
    impls=("reference", "chunk"),
    extra_leaves=(),
    **kwargs,
):
    """Run two implementations (reference and chunk unless ``impls`` says otherwise) from the
    same leaves (plus ``extra_leaves``, tensors inside ``kwargs`` such as a decay target);
    return (outputs, states, grads) pairs."""
    leaves = [x for x in (inputs[n] for n in INPUT_NAMES) if x is not None]
    leaves += list(weights.values()) + list(init_momentum.values()) + list(extra_leaves)
    for leaf in leaves:
        leaf.requires_grad_(True)
    results = []
    for impl in impls:
        batch = inputs["q"].shape[0]
        state = memory.initial_state(weights, batch)
        state.momentum = dict(init_momentum)
        if state_fn is not None:
            state = state_fn(state)
        y, final = scan(memory, inputs, state, impl=impl, **kwargs)
        results.append((y, final, gradients(probe_loss(y, final), leaves)))
    return results


def check_parity(results, rtol=1e-9):
    (y_ref, s_ref, g_ref), (y_chunk, s_chunk, g_chunk) = results
    assert_close(y_chunk, y_ref, rtol, "y")
    assert_states_close(s_chunk, s_ref, rtol)
    for i, (a, e) in enumerate(zip(g_chunk, g_ref)):
        assert_close(a, e, rtol, f"grad {i}")


def setup_case(memory_id, length, window=1, batch=2, heads=2):
    memory = MEMORIES[memory_id]
    inputs = random_inputs(memory, batch=batch, length=length, heads=heads, window=window)
    weights = random_weights(memory, heads)
    momentum = fresh_state(memory, weights, batch).momentum
    return memory, inputs, weights, momentum


def slice_inputs(inputs, start, stop):
    return {n: None if x is None else x[:, start:stop] for n, x in inputs.items()}


# bAbI qa1 in its file format: two stories, three questions (the second story starts at 1).
BABI_STORY = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
1 John travelled to the office.
2 Where is John? \toffice\t1
"""


def streamed_logits(model, ids: torch.Tensor, lengths: list[int]):
    """A model's logits over ``ids`` ``[B, T]`` fed in pieces of ``lengths`` (summing to T),
    the state carried from piece to piece: ``(logits [B, T, V], final state)``."""
    pieces, state, start = [], None, 0
    with torch.no_grad():
        for length in lengths:
            logits, state = model(ids[:, start : start + length], state=state)
            pieces.append(logits)
            start += length
    return torch.cat(pieces, 1), state


def rewrite_saved_memory(directory: Path, version: int, drop=(), add=None) -> None:
    """Rewrite a saved config as an older format wrote it: ``drop`` memory fields it did not
    have, ``add`` the ones it had instead, and stamp ``version``."""
    path = directory / "config.json"
    meta = json.loads(path.read_text())
    memory = meta["config"]["memory"]
    for key in drop:
        memory.pop(key)
    memory.update(add or {})
    if version <= 8:  # formats 1-8 had no MAC gate option
        for key in MAC_GATE_FIELDS:
            meta["config"].pop(key, None)
    if version <= 7:  # formats 1-7 had no separate theta timescales
        for key in FORMAT_8_FIELDS:
            memory.pop(key, None)
    if version <= 6:  # formats 1-6 had no per-head timescales
        for key in FORMAT_7_FIELDS:
            memory.pop(key, None)
    if version <= 5:  # formats 1-5 had no MAG option
        for key in MAG_FIELDS:
            meta["config"].pop(key, None)
    if version <= 4:  # formats 1-4 had no MAC options and no qk_init
        for key in MAC_FIELDS:
            meta["config"].pop(key, None)
        memory.pop("qk_init", None)
    meta["version"] = version
    path.write_text(json.dumps(meta))


def check_older_format(model, directory: Path, version: int, field: str) -> None:
    """Save ``model`` (in its default form for ``field``), rewrite the file as format
    ``version`` wrote it (``rewrite_saved_memory``), and check that it loads as the same
    function with ``field`` at its default, and that naming ``field`` in that format (a field
    it did not have) is refused with a CheckpointError naming it. ``field`` is a config
    field, or a memory field as ``"memory.NAME"``."""
    *parents, name = field.split(".")
    model.save_pretrained(str(directory))
    path = directory / "config.json"

    def section(meta: dict) -> dict:  # the dict of the saved config that holds ``name``
        part = meta["config"]
        for key in parents:
            part = part[key]
        return part

    default = section(json.loads(path.read_text()))[name]
    rewrite_saved_memory(directory, version)
    loaded = load_model(str(directory))
    value = loaded.config
    for key in (*parents, name):
        value = getattr(value, key)
    assert value == default
    ids = torch.randint(0, model.config.vocab_size, (1, 12))
    torch.testing.assert_close(loaded(ids)[0], model(ids)[0])
    meta = json.loads(path.read_text())
    section(meta)[name] = default  # an older format cannot name a later field
    path.write_text(json.dumps(meta))
    # the refusal names the field as a list entry (the message also holds the file's path)
    with pytest.raises(CheckpointError, match=rf"have no config\S* field\(s\) \[{name!r}\]"):
        load_model(str(directory))


def write_babi_qa1(folder: Path, **splits: str) -> Path:
    """Write bAbI qa1 files into ``folder``, one per split (``test=BABI_STORY``, ...)."""
    for split, text in splits.items():
        (folder / f"qa1_single-supporting-fact_{split}.txt").write_text(text)
    return folder


BOOK = " ".join(f"Sentence number {i} of the long and winding book text." for i in range(300))


def write_babi_and_books(folder: Path, **splits: str) -> tuple[Path, Path]:
    """bAbI qa1 files (``write_babi_qa1``) and a one-book haystack in ``folder/books``: the
    folders a BABILong-style task reads (its books are cut into sentences with Punkt)."""
    write_babi_qa1(folder, **splits)
    (folder / "books").mkdir()
    (folder / "books" / "book.txt").write_text(BOOK)
    return folder, folder / "books"
