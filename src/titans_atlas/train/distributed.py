"""Data-parallel training on torch.distributed: DDP or FSDP2, one process per device.

Launch with ``torchrun`` (``torchrun --nproc-per-node N -m titans_atlas train ...``). Each
process reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from the
environment torchrun sets, joins one process group (NCCL on CUDA, gloo on CPU, with
``train.dist_timeout`` on every collective) and trains its own rows of each global batch
(``batches.py`` slices them by rank). Nothing here communicates by hand: DDP and FSDP2
reduce the gradients; the few numbers the ranks must agree on (scored-token counts, losses,
evaluation sums, "stop" and "non-finite" flags) go through ``all_reduce``.

Axes: B batch rows of this rank, T tokens.

* ``Parallel`` says how this process takes part; ``Parallel()`` is one process and every
  method is then a no-op. ``setup_parallel(config)`` builds it from the environment.
* DDP: DistributedDataParallel; accumulation micro-batches run under ``no_sync()``.
* FSDP2: ``fully_shard`` on every block, then the root. Parameters stay fp32 and mixed
  precision is autocast, exactly as on one device, so the memory's initial weights and its
  inner state stay fp32 (a bf16 ``MixedPrecisionPolicy`` on a block would cast the initial
  weights, and with them the memory state, to bf16). Accumulation micro-batches run with
  ``set_requires_gradient_sync(False)``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from ..models.backbone import LanguageModel, ModelState
from ..models.rows import fresh_like, replace_rows, reset_rows, rows_to_reset
from .config import TrainConfig
from .runtime import memory_layers, pick_device

SIGNAL_CODES = {None: 0, "SIGINT": 2, "SIGTERM": 15}


def launched() -> bool:
    """Whether a launcher (torchrun, or SLURM through it) started this process as a rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a (possibly FSDP-sharded) tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


@dataclass
class Parallel:
    """One process (the default) or one rank of a torch.distributed job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    strategy: str = "none"  # "none" | "ddp" | "fsdp"
    device: torch.device | None = None
    owns_group: bool = False  # created the process group, so destroys it in close()

    @property
    def distributed(self) -> bool:
        return self.strategy != "none"

    @property
    def main(self) -> bool:
        return self.rank == 0

    # -- the model ----------------------------------------------------------------------------
    def wrap(self, model: LanguageModel, *, stream: bool) -> nn.Module:
        """The module to call for training: ``model`` itself, DDP around it, or ``model``
        sharded in place by FSDP2 (blocks, then the root)."""
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            # Stream mode: a rank whose rows all continue their streams does not read the
            # memory's initial weights, so DDP must look for unused parameters. Gradients
            # live in DDP's buckets (no second copy: 16 bytes per parameter with AdamW).
            return DistributedDataParallel(
                model, device_ids=ids, find_unused_parameters=stream, gradient_as_bucket_view=True
            )
        if self.strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh(self.device.type, (self.world_size,))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            # States are returned, never written in place (a project rule), so FSDP2's
            # warning about in-place ops on views of block outputs does not apply.
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* view tensor")
        return model

    def row_reset(self, model: LanguageModel) -> Callable:
        """``reset_rows`` for stream mode; under FSDP2 a ``BlockResets`` that resets each
        block's rows inside that block's forward (where its parameters are unsharded)."""
        return BlockResets(model) if self.strategy == "fsdp" else reset_rows

    @contextmanager
    def gradient_sync(self, module: nn.Module, enabled: bool) -> Iterator[None]:
        """Around one micro-batch's forward and backward: ``enabled=False`` accumulates the
        gradient locally (no all-reduce / reduce-scatter)."""
        if self.strategy == "ddp" and not enabled:
            with module.no_sync():
                yield
            return
        if self.strategy == "fsdp":
            fsdp_root = getattr(module, "_orig_mod", module)  # through torch.compile
            fsdp_root.set_requires_gradient_sync(enabled)
        yield

    # -- agreement between ranks ----------------------------------------------------------------
    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sums over the ranks, in float64."""
        return self._all_reduce(values, "sum")

    def all_max(self, values: list[float]) -> list[float]:
        return self._all_reduce(values, "max")

    def _all_reduce(self, values: list[float], op: str) -> list[float]:
        if not self.distributed:
            return list(values)
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor.tolist()

    def sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor summed over the ranks (a new tensor; the input itself when alone)."""
        if not self.distributed:
            return tensor
        import torch.distributed as dist

        total = tensor.clone()
        dist.all_reduce(total)
        return total

    def any(self, flag: bool) -> bool:
        return self.all_sum([float(flag)])[0] > 0

    def agree_signal(self, name: str | None) -> str | None:
        """A stop signal seen by any rank stops every rank after the same step."""
        if not self.distributed:
            return name
        code = int(self.all_max([float(SIGNAL_CODES[name])])[0])
        return {c: n for n, c in SIGNAL_CODES.items()}[code]

    def gather_json(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (JSON-able), in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        data = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8, device=self.device)
        sizes = [
            torch.zeros(1, dtype=torch.int64, device=self.device) for _ in range(self.world_size)
        ]
        dist.all_gather(sizes, torch.tensor([data.numel()], device=self.device))
        longest = int(max(s.item() for s in sizes))
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[: data.numel()] = data
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded)
        return [
            json.loads(bytes(p[: int(s.item())].tolist()).decode()) for p, s in zip(parts, sizes)
        ]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            if self.device.type == "cuda":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    def close(self) -> None:
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owns_group = False


def setup_parallel(config: TrainConfig) -> Parallel:
    """This process's part in the run, from ``train.strategy`` and torchrun's variables.

    ``auto``: DDP when a launcher started several processes, else a single process.
    ``ddp`` / ``fsdp`` without a launcher form a world of one (FSDP2 on one GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1")) if launched() else 1
    strategy = config.strategy
    if strategy == "auto":
        strategy = "ddp" if world > 1 else "none"
    if strategy == "none":
        if world > 1:
            raise ValueError(
                f"train.strategy='none' but the launcher started {world} processes: "
                "use train.strategy=ddp or fsdp"
            )
        return Parallel()
    _check_torch()
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if launched() else 0
    device = _rank_device(config, local_rank, world)
    import torch.distributed as dist

    owns = False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = timedelta(seconds=config.dist_timeout)
        if launched():
            dist.init_process_group(backend, timeout=timeout)
        else:  # a world of one: an in-memory store, no port to pick
            store = dist.HashStore()
            dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
        owns = True
    return Parallel(
        dist.get_rank(), dist.get_world_size(), local_rank, strategy, device, owns_group=owns
    )


def _check_torch() -> None:
    """FSDP2's public ``fully_shard`` and DCP's distributed safetensors storage (torch 2.9)."""
    import inspect

    import torch.distributed.checkpoint as dcp
    import torch.distributed.fsdp as fsdp

    writer = getattr(dcp, "HuggingFaceStorageWriter", None)
    if (
        not hasattr(fsdp, "fully_shard")
        or writer is None
        or ("save_distributed" not in inspect.signature(writer).parameters)
    ):
        raise ValueError(
            f"distributed training needs torch >= 2.9 (FSDP2, DCP's safetensors storage); "
            f"this is torch {torch.__version__}"
        )


def _rank_device(config: TrainConfig, local_rank: int, world: int) -> torch.device:
    device = pick_device(config)
    if device.type != "cuda":
        return device
    if device.index is not None and world > 1:
        raise ValueError(
            f"train.device={config.device!r}: with several processes each rank takes "
            "cuda:LOCAL_RANK; set train.device=cuda (or auto) and pick GPUs with "
            "CUDA_VISIBLE_DEVICES"
        )
    index = device.index if device.index is not None else local_rank
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


class BlockResets:
    """Stream-mode row resets for FSDP2: called like ``reset_rows(model, state, rows)``, it
    returns ``state`` unchanged and a forward pre-hook on each block replaces that block's
    rows during the next forward, where FSDP2 holds the block's parameters (the memory's
    initial weights) unsharded. Every rank builds the reset, even with no row to reset, so
    all ranks give the initial weights a gradient (FSDP2 needs the same parameters to have
    gradients on every rank; the trainer drops it where one process would have none)."""

    def __init__(self, model: LanguageModel) -> None:
        self.rows: torch.Tensor | None = None
        self.last = model.blocks[-1]
        self.handles = [
            block.register_forward_pre_hook(self._hook, with_kwargs=True) for block in model.blocks
        ]

    def __call__(
        self, model: LanguageModel, state: ModelState | None, rows: torch.Tensor | None
    ) -> ModelState | None:
        self.rows = None
        if not rows_to_reset(state, rows) and (state is None or rows is None or bool(rows.all())):
            return None
        self.rows = rows  # every rank, even with no row to reset (the class docstring)
        return state

    def _hook(self, block: nn.Module, args: tuple, kwargs: dict):
        rows = self.rows
        if block is self.last:
            self.rows = None  # one forward only
        if rows is None or args[1] is None:
            return None
        x, block_state, *rest = args
        layers = memory_layers(block)
        fresh = fresh_like(block_state, layers)
        return (x, replace_rows(block_state, fresh, rows), *rest), kwargs

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def initial_weight_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for layer in memory_layers(model) for p in layer.initial_weights.values()]
