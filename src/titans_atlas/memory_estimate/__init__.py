"""Memory estimates, before anything runs: one home for both budgets.

* ``inference``: peak bytes of streaming a length through a model in pieces (what
  ``titans eval`` checks against the free memory, refusing with ``MemoryBudgetError``).
* ``training``: bytes per device of a training run, by part (weights, gradients, AdamW,
  FSDP2 working set, stream state, activations) -- the table in docs/training.md:
  ``python -m titans_atlas.memory_estimate.training --model mag --presets 170m``.
"""

from __future__ import annotations

from .inference import (
    InferenceEstimate,
    MemoryBudgetError,
    available_memory,
    check_memory,
    check_prompt_memory,
    estimate_peak_memory,
    state_bytes_at,
)
from .training import TrainingEstimate, estimate_memory, table_row

__all__ = [
    "InferenceEstimate",
    "MemoryBudgetError",
    "TrainingEstimate",
    "available_memory",
    "check_memory",
    "check_prompt_memory",
    "estimate_memory",
    "estimate_peak_memory",
    "state_bytes_at",
    "table_row",
]
