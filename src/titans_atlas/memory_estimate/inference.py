"""How much memory streaming a length will take (evaluation), before it runs -- and a
refusal, with the number, when that exceeds what the device has free.

Streaming keeps the cost of a length of L tokens at

    parameters + 2 x state(L) + working set of one piece of P tokens

(the state going in and the state coming out of a call coexist). ``state(L)`` is measured,
not guessed: the model streams two short probes and the growth of ``ModelState.nbytes()``
between them is extrapolated linearly (zero for memory and sliding-window models, the KV cache
for a full-attention Transformer). The working set of a piece is a conservative count of its
largest temporaries: logits (and their log-softmax), the block activations, the memory scan's
chunk matrices and the attention score blocks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..layers.attention import QUERY_BLOCK
from ..layers.neural_memory import NeuralMemory

# Live [B, P, D]-sized temporaries per call and [B, H, P, C] chunk matrices per memory scan:
# calibrated so the estimate bounds the measured peak of the debug-to-small models (lmm, mac,
# atlas, transformer; docs/evaluation.md) -- a refusal errs on the side of caution.
HIDDEN_COPIES = 48
SCAN_COPIES = 24
LOGIT_COPIES = 3  # logits, log-softmax, the upcast/gathered copy
# A prompt in host memory while it is built: its text (a few bytes a token), the list of
# Python ints (an 8-byte pointer and a 32-byte int object each) and the int64 tensor.
PROMPT_BYTES_PER_TOKEN = 64


class MemoryBudgetError(RuntimeError):
    """An evaluation would need more memory than the device has free (use force to run)."""


@dataclass(frozen=True)
class InferenceEstimate:
    """Peak bytes of streaming ``length`` tokens in pieces of ``piece_size``."""

    length: int
    piece_size: int
    parameters: int
    state: int  # the stream state after `length` tokens
    working: int  # one piece's temporaries

    @property
    def total(self) -> int:
        return self.parameters + 2 * self.state + self.working

    def describe(self) -> str:
        return (
            f"{gib(self.total)} for {self.length} tokens in pieces of {self.piece_size} "
            f"(parameters {gib(self.parameters)}, state {gib(self.state)} x 2, "
            f"one piece {gib(self.working)})"
        )


def gib(n: int) -> str:
    """``n`` bytes in GiB, for messages."""
    return f"{n / 2**30:.3f} GiB"


def state_bytes_at(model: torch.nn.Module, length: int) -> int:
    """``ModelState.nbytes()`` after ``length`` tokens, extrapolated from two probes."""
    size, growth, probed = _probe_state(model)
    return int(size + growth * max(0, length - probed))


@torch.no_grad()
def _probe_state(model: torch.nn.Module) -> tuple[int, float, int]:
    """(state bytes after the second probe, bytes per token it grows by, tokens probed)."""
    config = model.config
    horizon = max(getattr(config, "window", 1), _largest_chunk(model), 1)
    first, second = 2 * horizon + 1, 4 * horizon + 1  # off the chunk grid: a chunk base is held
    device = _device_of(model)
    ids = torch.zeros(1, second, dtype=torch.long, device=device)
    _, state = model(ids[:, :first], last_only=True)
    size_first = state.nbytes()
    _, state = model(ids[:, first:], state=state, last_only=True)
    growth = max(0, state.nbytes() - size_first) / (second - first)
    return state.nbytes(), growth, second


def estimate_peak_memory(
    model: torch.nn.Module, length: int, piece_size: int, batch_size: int = 1
) -> InferenceEstimate:
    """Peak bytes to stream ``length`` tokens through ``model`` in pieces of ``piece_size``."""
    if length < 1 or piece_size < 1 or batch_size < 1:
        raise ValueError(
            f"length, piece_size and batch_size must be >= 1, got {length}, {piece_size}, "
            f"{batch_size}"
        )
    config = model.config
    first_parameter = next(iter(model.parameters()), None)
    element = first_parameter.element_size() if first_parameter is not None else 4
    params = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    piece = min(piece_size, length)
    rows = batch_size * piece
    heads, window = getattr(config, "num_heads", 1), getattr(config, "window", 0)
    chunk = _largest_chunk(model)
    size, growth, probed = _probe_state(model)
    # a growing state is a full-attention KV cache: a query block then sees every earlier key
    keys = length if growth > 0 else min(piece, QUERY_BLOCK) + window
    attention = batch_size * heads * min(piece, QUERY_BLOCK) * (keys + 64) * 4 * element
    working = (
        rows * config.vocab_size * 4 * LOGIT_COPIES
        + rows * config.dim * element * HIDDEN_COPIES
        + rows * heads * chunk * element * SCAN_COPIES  # one layer's scan is live at a time
        + attention
    )
    state = int(size + growth * max(0, length - probed)) * batch_size
    return InferenceEstimate(length, piece_size, params, state, working)


def available_memory(device: torch.device | str = "cpu") -> int:
    """Bytes free on ``device``: CUDA's free memory, or MemAvailable (capped by a cgroup
    limit) on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    free = _meminfo_available()
    limit = _cgroup_room()
    return min(free, limit) if limit is not None else free


def _meminfo_available() -> int:
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_room() -> int | None:
    limit, usage = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")
    try:
        text = limit.read_text().strip()
        return None if text == "max" else int(text) - int(usage.read_text())
    except (OSError, ValueError):
        return None


def check_memory(estimate: InferenceEstimate, available: int, force: bool = False) -> None:
    """Raise MemoryBudgetError when ``estimate`` exceeds ``available`` bytes, unless forced."""
    if estimate.total > available and not force:
        raise MemoryBudgetError(
            f"evaluating needs about {estimate.describe()}, but only {gib(available)} is "
            "free; use a smaller length or piece size, or --force to run anyway"
        )


def check_prompt_memory(length: int, force: bool = False) -> None:
    """Raise MemoryBudgetError when a prompt of ``length`` tokens would not fit in the host's
    free memory as it is built (text, token list and tensor), unless forced."""
    need, free = length * PROMPT_BYTES_PER_TOKEN, available_memory("cpu")
    if need > free and not force:
        raise MemoryBudgetError(
            f"building a prompt of {length} tokens needs about {gib(need)} of host memory, "
            f"but only {gib(free)} is free; use a smaller length, or --force to run anyway"
        )


def _largest_chunk(model: torch.nn.Module) -> int:
    """The memory chunk of the model's memory layers (0 without memory)."""
    chunks = [m.config.chunk_size for m in model.modules() if isinstance(m, NeuralMemory)]
    return max(chunks, default=0)


def _device_of(model: torch.nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


MemoryEstimate = InferenceEstimate  # its name in titans_atlas.eval.memory
