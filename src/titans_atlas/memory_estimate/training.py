"""Memory per device of a training run, from the model config: what ``docs/training.md``'s
table is computed with.

    python -m titans_atlas.memory_estimate.training --model mag --presets 170m 340m 760m \\
        --seq-len 4096 --world-size 8      # the table in docs/training.md (GiB)

Parts, in bytes per device (fp32 weights, as the trainer keeps them; AdamW):

* weights, gradients, optimizer (2 moments): 4 + 4 + 8 bytes per parameter; DDP keeps all
  of it on every device, FSDP2 a 1 / world_size shard, plus a working set of unsharded
  blocks (this block and the prefetched next one: their weights and gradients).
* stream state: ``ModelState.nbytes()`` of the state a real forward returns (memory weights
  and momentum, conv and KV caches), per row; 0 in packed mode.
* activations: the bytes autograd saves for backward in the forward and the loss, counted
  with saved-tensor hooks over a real CPU forward (storages counted once, parameters
  excluded), in fp32. Blocks are identical, so models of depth 1 and 2 at the full width
  give the per-block part and the rest; probes of ``probe_tokens`` and twice that give the
  per-token part and the rest (attention is windowed, so it is affine in tokens).

Not counted: temporaries of one op, the gradient of the activations during backward, the
allocator's slack, CUDA / NCCL workspaces; bf16 autocast makes most activations smaller.
``tests/train/test_memory_estimate.py`` checks each part against a full-depth run.
"""

from __future__ import annotations

import argparse
import json
import weakref
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F

from ..models.config import ModelConfig
from ..models.registry import build_model, model_config

WEIGHT, GRADIENT, ADAM = 4, 4, 8  # bytes per parameter (fp32; AdamW: two fp32 moments)


@dataclass
class TrainingEstimate:
    """Bytes per device of a training run, by part (``total``: all but ``parameters``)."""

    parameters: int
    weights: int
    gradients: int
    optimizer: int
    working: int  # FSDP2: unsharded blocks in flight
    stream_state: int
    activations: int

    @property
    def total(self) -> int:
        return sum(v for k, v in asdict(self).items() if k != "parameters")


@dataclass
class _Probe:
    """One forward at the full width: saved activation bytes and state bytes."""

    activations: int
    state: int


def probe(
    config: ModelConfig,
    tokens: int,
    *,
    rows: int = 1,
    memory_checkpoint: bool = False,
    activations: bool = True,
    device: str = "cpu",
) -> _Probe:
    """Saved-for-backward bytes of the forward + loss of ``rows`` rows of ``tokens`` tokens,
    and the bytes of the ``ModelState`` it returns (fp32, on ``device``). ``activations=False``
    runs without autograd: the state only, in a fraction of the memory."""
    generator = torch.Generator().manual_seed(0)
    if not activations:
        with torch.no_grad():
            ids = torch.randint(0, config.vocab_size, (rows, tokens), generator=generator)
            return _Probe(0, build_model(config).to(device)(ids.to(device))[1].nbytes())
    model = build_model(config).to(device)
    if memory_checkpoint:
        model.set_runtime(memory_checkpoint=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: list[weakref.ref] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(weakref.ref(tensor))
        return tensor

    ids = torch.randint(0, config.vocab_size, (rows, tokens + 1), generator=generator).to(device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits, state = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    # what the loss's graph still holds (a branch whose graph was dropped freed its tensors)
    storages = {}
    for ref in saved:
        tensor = ref()
        if tensor is not None and tensor.untyped_storage().data_ptr() not in params:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    del loss
    return _Probe(sum(storages.values()), state.nbytes())


_PROBES: dict[tuple, _Probe] = {}


def _probe_cached(
    config: ModelConfig, depth: int, tokens: int, recompute: bool, grad: bool, device: str
):
    """Probes of 2 rows, kept for the process (a table asks for each several times)."""
    key = (json.dumps(config.to_dict(), sort_keys=True), depth, tokens, recompute, grad, device)
    if key not in _PROBES:
        _PROBES[key] = probe(
            replace(config, depth=depth), tokens, rows=2, memory_checkpoint=recompute,
            activations=grad, device=device,
        )  # fmt: skip
    return _PROBES[key]


def parameter_counts(config: ModelConfig) -> tuple[int, int]:
    """(parameters outside the blocks, parameters per block), from meta-device models."""
    counts = []
    for depth in (1, 2):
        with torch.device("meta"):
            counts.append(build_model(replace(config, depth=depth)).num_parameters())
    block = counts[1] - counts[0]
    return counts[0] - block, block


def estimate_memory(
    config: ModelConfig,
    *,
    batch_size: int,
    seq_len: int,
    world_size: int = 1,
    strategy: str = "ddp",
    stream: bool = True,
    memory_checkpoint: bool = False,
    probe_tokens: int | None = None,
    activations: bool = True,
    device: str = "cpu",
) -> TrainingEstimate:
    """Bytes per device for ``batch_size`` rows of ``seq_len`` tokens on each of
    ``world_size`` devices. ``probe_tokens`` (default: the window): the shorter of the two
    measured forwards; it must cover the attention window (the KV cache is then full size
    and the saved bytes grow linearly from there). ``activations=False``: leave them out
    (0), which needs only a gradient-free forward per depth."""
    if strategy not in ("ddp", "fsdp"):
        raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {strategy!r}")
    tokens = probe_tokens or config.window
    if tokens < min(seq_len, config.window):
        raise ValueError(f"probe_tokens={tokens} must cover window={config.window}")
    rest, block = parameter_counts(config)
    total = rest + config.depth * block
    shard = world_size if strategy == "fsdp" else 1
    # saved bytes are affine in depth and in tokens (past the window) and linear in rows from
    # 2 on (one row keeps a few reshapes as views): 4 probes of 2 rows pin them down
    grid = {
        (d, t): _probe_cached(config, d, t, memory_checkpoint, activations, device)
        for d in (1, 2)
        for t in ((tokens, 2 * tokens) if activations else (tokens,))
    }

    def at_depth(t: int, part: str) -> float:
        one, two = getattr(grid[1, t], part), getattr(grid[2, t], part)
        return one + (config.depth - 1) * (two - one)

    saved = 0.0
    if activations:
        short, long = at_depth(tokens, "activations"), at_depth(2 * tokens, "activations")
        saved = short + (seq_len - tokens) * (long - short) / tokens
    return TrainingEstimate(
        parameters=total,
        weights=-(-total * WEIGHT // shard),
        gradients=-(-total * GRADIENT // shard),
        optimizer=-(-total * ADAM // shard),
        working=2 * block * (WEIGHT + GRADIENT) if strategy == "fsdp" else 0,
        stream_state=round(batch_size * at_depth(tokens, "state") / 2) if stream else 0,
        activations=round(batch_size * saved / 2),
    )


def table_row(
    model: str,
    preset: str,
    seq_len: int,
    world_size: int,
    probe_tokens: int,
    activations: bool,
    device: str = "cpu",
) -> str:
    """One markdown row (GiB): parameters; weights + gradients + AdamW per device under DDP
    and under FSDP2 on ``world_size`` devices; per row of ``seq_len`` tokens the stream state
    and (``activations``) the fp32 activations without and with memory checkpointing."""
    config = model_config(model, preset)
    kwargs = {
        "batch_size": 1, "seq_len": seq_len, "world_size": world_size,
        "probe_tokens": max(probe_tokens, config.window), "activations": activations,
        "device": device,
    }  # fmt: skip
    ddp = estimate_memory(config, strategy="ddp", **kwargs)
    fsdp = estimate_memory(config, strategy="fsdp", **kwargs)
    gib = [
        ddp.weights + ddp.gradients + ddp.optimizer,
        fsdp.weights + fsdp.gradients + fsdp.optimizer + fsdp.working,
        ddp.stream_state,
    ]
    if activations:
        recompute = estimate_memory(config, strategy="ddp", memory_checkpoint=True, **kwargs)
        gib += [ddp.activations, recompute.activations]
    cells = [f"{model} {preset}", f"{ddp.parameters / 1e6:.0f}M"]
    cells += [f"{b / 2**30:.2f}" for b in gib] + ["--"] * (5 - len(gib))
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mag")
    parser.add_argument("--presets", nargs="+", default=["170m", "340m", "760m"])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--probe-tokens", type=int, default=512, help="(at least the window)")
    parser.add_argument("--device", default="cpu", help="where the probes run (cuda: seconds)")
    parser.add_argument(
        "--no-activations", action="store_true",
        help="skip the activation probes (forwards with autograd: ~10x the memory of the "
        "activations they measure at 2 x the window, e.g. > 20 GB at 340m)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"| model | parameters | DDP: weights + grads + AdamW | FSDP2 x{args.world_size}: the same "
        f"+ working set | stream state / row | activations / row ({args.seq_len} tokens) | "
        "... with memory_checkpoint |\n|---|---|---|---|---|---|---|"
    )
    for preset in args.presets:
        print(
            table_row(
                args.model, preset, args.seq_len, args.world_size, args.probe_tokens,
                not args.no_activations, args.device,
            )
        )  # fmt: skip


MemoryEstimate = TrainingEstimate  # its name in titans_atlas.train.memory_estimate

if __name__ == "__main__":
    main()
