"""Runtime choices of a run (device, precision, checkpointing, compile, signals) and the
memory statistics the loop logs: per layer, the mean learned lr / momentum / decay gates and the
norm of the memory state.

Axes: B batch, T tokens, H heads.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import torch

from ..layers.neural_memory import NeuralMemory
from ..models.backbone import LanguageModel, ModelState
from ..ops import validating, value_checks_enabled
from ..ops.state import MemoryState
from ..validation import check_device
from .config import TrainConfig


def pick_device(config: TrainConfig) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return check_device("train.device", config.device)


def autocast_context(config: TrainConfig, device: torch.device):
    """bf16 autocast on CUDA (``precision`` auto or bf16); fp32 elsewhere. The memory layer
    keeps its state in fp32 under autocast."""
    if config.precision == "bf16" and device.type != "cuda":
        raise ValueError("train.precision='bf16' is autocast on CUDA; on CPU use 'fp32' or 'auto'")
    if device.type == "cuda" and config.precision in ("auto", "bf16"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def memory_layers(model: torch.nn.Module) -> list[NeuralMemory]:
    return [m for m in model.modules() if isinstance(m, NeuralMemory)]


def enable_activation_checkpointing(model: LanguageModel) -> None:
    """Recompute each block's forward in backward (non-reentrant ``torch.utils.checkpoint``),
    so a block keeps only its inputs for backward. Wraps each block's ``forward`` on the
    instance: parameter names, hooks and checkpoints are unchanged, and it composes with
    DDP, FSDP2 (which unshards the block before the recompute) and ``torch.compile``."""
    from torch.utils.checkpoint import checkpoint

    for block in model.blocks:

        def forward(*args: Any, _inner=block.forward, **kwargs: Any):
            if torch.compiler.is_compiling():  # value checks never run while tracing
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)
            # The recompute runs inside backward, outside the caller's ``validating`` block
            # (and on another thread on CUDA): it must make the forward's choice again, or it
            # records another graph and checkpoint refuses it.
            enabled = value_checks_enabled()

            def run(*inner_args: Any, **inner_kwargs: Any):
                with validating(enabled):
                    return _inner(*inner_args, **inner_kwargs)

            return checkpoint(run, *args, use_reentrant=False, **kwargs)

        block.forward = forward


class GateStats:
    """Forward pre-hooks that record each memory layer's mean gates while ``active``. They keep
    the means as tensors and ``collect`` reads them: a ``float()`` inside the hook would be a
    host sync per layer and, under ``torch.compile``, a graph break."""

    def __init__(self, model: LanguageModel) -> None:
        self.layers = memory_layers(model)
        self.active, self.sums = False, [dict() for _ in self.layers]
        self.handles = [
            layer.register_forward_pre_hook(self._hook(i)) for i, layer in enumerate(self.layers)
        ]

    def _hook(self, index: int):
        def record(module: NeuralMemory, args: tuple[Any, ...]) -> None:
            if not self.active:
                return
            with torch.no_grad():
                lr, momentum, decay, _ = module._gates(args[0])  # each [B, T, H]
                for name, gate in (("lr", lr), ("momentum", momentum), ("decay", decay)):
                    self.sums[index][name] = gate.detach().float().mean()

        return record

    def collect(self) -> list[dict[str, float]]:
        values, self.sums = self.sums, [dict() for _ in self.layers]
        return [{name: float(mean) for name, mean in layer.items()} for layer in values]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def memory_state_norms(state: ModelState | None) -> list[float]:
    """Per memory (in block order): the mean over samples of the memory weights' norm."""
    norms: list[float] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, MemoryState):
            squares = sum(w.detach().float().pow(2).flatten(1).sum(1) for w in obj.weights.values())
            norms.append(float(squares.sqrt().mean()))
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list | tuple):
            for value in obj:
                walk(value)
        elif hasattr(obj, "__dataclass_fields__"):
            for name in obj.__dataclass_fields__:
                walk(getattr(obj, name))

    if state is not None:
        walk(state.blocks)
    return norms


class SignalFlag:
    """SIGINT / SIGTERM set a flag the loop checks after each step (a second SIGINT
    interrupts at once)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.previous = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: no handlers, the caller owns signals
            self.previous = {}

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
