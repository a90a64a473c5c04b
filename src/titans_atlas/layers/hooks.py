"""Observing (and, for probes, steering) what a memory layer writes: a documented hook
instead of patching ``memory_scan`` or a layer's private methods.

Axes: B batch, T tokens, H heads, Dk key width, Dh head width, c Omega window.

``register_memory_hook(layer, fn)`` calls ``fn(event)`` on every call of a ``NeuralMemory``
layer, with

* ``MemoryWrite`` before the scan (``forward``): what the layer hands ``memory_scan`` --
  queries ``q`` and keys ``k`` ``[B, T, H, Dk]``, values ``v`` ``[B, T, H, Dh]``, and the
  gates ``lr`` (theta), ``momentum`` (eta), ``decay`` (alpha) ``[B, T, H]`` and ``omega``
  (gamma, ``[B, T, H, c]`` or None);
* ``MemoryRead`` after a read-only retrieval (``retrieve``, MAC's eq. 21): the queries'
  input ``x`` and the ``output`` ``[B, T, D]``.

A hook returns None to observe only, or an event of the same kind to replace what the layer
uses (``dataclasses.replace(event, lr=event.lr * 2)`` scales the writes). Remove a hook with
the returned handle's ``remove()``. Hooks run inside the forward (under its autograd and
``no_grad`` settings); detach what you keep.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


@dataclass(frozen=True)
class MemoryWrite:
    """One call's inputs to ``memory_scan`` (shapes in the module docstring)."""

    layer: nn.Module  # the NeuralMemory
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    lr: torch.Tensor
    momentum: torch.Tensor
    decay: torch.Tensor
    omega: torch.Tensor | None


@dataclass(frozen=True)
class MemoryRead:
    """One read-only retrieval: its input ``x`` and ``output`` ``[B, T, D]``."""

    layer: nn.Module  # the NeuralMemory
    x: torch.Tensor
    output: torch.Tensor


MemoryEvent = Union[MemoryWrite, MemoryRead]  # noqa: UP007  (a runtime alias)
MemoryHook = Callable[[MemoryEvent], Union[MemoryEvent, None]]  # noqa: UP007


def register_memory_hook(layer: nn.Module, fn: MemoryHook) -> RemovableHandle:
    """Call ``fn(event)`` on every write and read-only retrieval of ``layer`` (see the
    module docstring); returns a handle whose ``remove()`` detaches it."""
    hooks = layer.memory_hooks
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


def new_hook_table() -> OrderedDict[int, MemoryHook]:
    return OrderedDict()


def run_hooks(hooks: OrderedDict[int, MemoryHook], event: MemoryEvent) -> MemoryEvent:
    """``event`` after every hook, in registration order (a hook's returned event replaces
    it; it must be of the same kind)."""
    for fn in list(hooks.values()):
        changed = fn(event)
        if changed is not None:
            if type(changed) is not type(event):
                raise TypeError(
                    f"a memory hook must return None or a {type(event).__name__}, "
                    f"got {type(changed).__name__}"
                )
            event = changed
    return event
