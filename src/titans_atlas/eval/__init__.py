"""Evaluation: a registry of tasks (generator or loader, scorer, plot) run by ``run_task``
and by ``titans eval``; seeded recall batches for training on the same tasks.

    from titans_atlas.eval import EvalSettings, run_task, write_result
    result = run_task("sniah-pk", model, tokenizer, EvalSettings(lengths=(1024, 2048)))

Nothing here imports an optional dependency until a task needs it (matplotlib for plots,
nltk for sentence splitting, wonderwords for needle keys, datasets for BABILong).
"""

from ..memory_estimate.inference import MemoryBudgetError, MemoryEstimate, estimate_peak_memory
from ..tasks import (
    Batch,
    babilong_style_batch,
    kv_recall_batch,
    mqar_batch,
    passkey_batch,
    prompt_answer_batch,
    sniah_batch,
)
from . import babilong, mqar, niah, perplexity, recall  # noqa: F401  (they register tasks)
from .inference import Evaluator
from .loading import LoadedCheckpoint, load_checkpoint, resolve_model_dir
from .metrics import babilong_compare_answers, ruler_string_match_all
from .recall import batch_accuracy
from .registry import (
    TASKS,
    EvalSettings,
    Scoring,
    Task,
    get_task,
    list_tasks,
    register_task,
    run_task,
)
from .results import write_result

__all__ = [
    "TASKS",
    "Batch",
    "EvalSettings",
    "Evaluator",
    "LoadedCheckpoint",
    "MemoryBudgetError",
    "MemoryEstimate",
    "Scoring",
    "Task",
    "babilong_compare_answers",
    "babilong_style_batch",
    "batch_accuracy",
    "estimate_peak_memory",
    "get_task",
    "kv_recall_batch",
    "list_tasks",
    "load_checkpoint",
    "mqar_batch",
    "passkey_batch",
    "prompt_answer_batch",
    "register_task",
    "resolve_model_dir",
    "ruler_string_match_all",
    "run_task",
    "sniah_batch",
    "write_result",
]
