"""Synthetic tasks as data, below both ``train`` and ``eval`` (neither imports the other).

Two shapes of the same tasks:

* training tasks: ``TASKS[name](seq_len, **args)`` builds a task whose
  ``sample(batch_size, generator)`` returns ``inputs [B, T]`` int64 and ``labels [B, T]``
  int64 (-100 where a position is not scored), from a seeded ``torch.Generator`` only. Use
  one with ``data.source = "task:NAME"`` and ``data.task_args = {...}``. Registered:
  ``kv_recall``, ``kv_distance``, ``kv_multi`` (key-value recall), ``kv_persistent`` (facts
  that last a carried stream), ``babilong_style`` (bAbI in noise) and ``mqar`` (Zoology's
  multi-query associative recall, ``MQAR``: ``vocab_size``, ``num_pairs``, ``power_a``; its
  validation draws from held-out seeds).
* seeded batches for evaluation and probes: ``kv_recall_batch``, ``mqar_batch``,
  ``passkey_batch``, ``sniah_batch``, ``babilong_style_batch`` return
  ``Batch(input_ids [B, T], labels [B, T])`` with the labels already shifted.

Modules: ``base`` (IGNORE, Batch, Task), ``kv`` (key-value recall), ``persistent``
(facts that last a carried stream), ``mqar``, ``needles`` (passkey / S-NIAH prompts),
``babi`` and ``babilong`` (bAbI facts in book noise), ``haystack`` (book sentences, needle
words).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .babilong import BabilongStyle, babilong_labels, babilong_style_batch, format_prompt
from .base import IGNORE, Batch, Task
from .kv import DistanceRecall, KeyValueRecall, MultiQueryRecall, kv_recall_batch
from .mqar import MQAR, mqar_batch
from .needles import (
    build_niah_sample,
    build_passkey_sample,
    passkey_batch,
    prompt_answer_batch,
    sniah_batch,
)
from .persistent import PersistentRecall

TASKS: dict[str, Callable[..., Task]] = {
    "kv_recall": KeyValueRecall,
    "kv_distance": DistanceRecall,
    "kv_multi": MultiQueryRecall,
    "kv_persistent": PersistentRecall,
    "babilong_style": BabilongStyle,
    "mqar": MQAR,
}


def make_task(name: str, seq_len: int, args: dict[str, Any]) -> Task:
    """The registered task ``name`` for sequences of ``seq_len`` tokens; ValueError naming
    the registered ones for an unknown name or bad ``args``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; registered: {sorted(TASKS)}")
    try:
        return TASKS[name](seq_len=seq_len, **args)
    except TypeError as err:
        raise ValueError(f"bad data.task_args for task {name!r}: {err}") from err


__all__ = [
    "IGNORE",
    "MQAR",
    "TASKS",
    "BabilongStyle",
    "Batch",
    "DistanceRecall",
    "KeyValueRecall",
    "MultiQueryRecall",
    "PersistentRecall",
    "Task",
    "babilong_labels",
    "babilong_style_batch",
    "build_niah_sample",
    "build_passkey_sample",
    "format_prompt",
    "kv_recall_batch",
    "make_task",
    "mqar_batch",
    "passkey_batch",
    "prompt_answer_batch",
    "sniah_batch",
]
