"""The task registry: every evaluation is a ``Task`` -- a generator or loader of samples, a
scorer of one sample, a summary and a plot -- run the same way by ``run_task``.

Samples and outcomes are plain JSON-ready dicts: a sample says what the model is shown
(``prompt`` text or ``input_ids``) plus what the scorer needs; its outcome drops the long
prompt and keeps what the model answered and how it was scored.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..memory_estimate.inference import check_prompt_memory
from ..tokenizers import Tokenizer
from ..validation import check_int
from .inference import DEFAULT_PIECE, Evaluator

SCORING_MODES = ("likelihood", "greedy")
# The longest context an evaluation builds (16M tokens, above BABILong's 10M); a prompt is
# built in host memory before the model reads it (memory.PROMPT_BYTES_PER_TOKEN a token).
MAX_EVAL_LENGTH = 1 << 24
MAX_SAMPLES = 100_000  # per cell: some tasks build a cell's samples at once


@dataclass
class EvalSettings:
    """Everything a task may read. Empty tuples mean the task's defaults."""

    lengths: tuple[int, ...] = ()  # tokens (perplexity: the most tokens to read)
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)  # needle depth, fraction of context
    distances: tuple[int, ...] = ()  # kv-recall: tokens between a value and its query
    samples: int = 4  # per (length, depth / task) cell
    seed: int = 0
    text: str | None = None  # perplexity: a UTF-8 text file
    bin_size: int = 1024  # perplexity: tokens per bin of the loss-by-position curve
    haystack_dir: str | None = None  # folder of book *.txt files (S-NIAH essay, BABILong-style)
    babi_dir: str | None = None  # folder holding bAbI qaN_*_{test,train}.txt files
    babi_split: str = "test"
    dataset: str = "RMT-team/babilong"  # Hugging Face name or a local copy in its layout
    babi_tasks: tuple[str, ...] = ("qa1", "qa2", "qa3", "qa4", "qa5")
    scoring: str = "likelihood"  # BABILong: "likelihood" over the labels or "greedy" output
    max_new_tokens: int | None = None  # greedy answers; None: the task's default
    kv_pairs: int | None = None  # MQAR pairs per sequence; None: length // 16
    piece_size: int = DEFAULT_PIECE
    force: bool = False  # run even when the memory estimate exceeds what is free
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {self.scoring!r}")
        check_int("samples", self.samples, 1, MAX_SAMPLES)
        check_int("seed", self.seed, 0)
        check_int("bin_size", self.bin_size, 1)
        check_int("piece_size", self.piece_size, 1, MAX_EVAL_LENGTH)
        for name in ("max_new_tokens", "kv_pairs"):  # None: the task's default
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        # checked before any sample is built: a prompt of 10^8 tokens took minutes to build
        for name, low in (("lengths", 0), ("distances", 1)):
            for n in getattr(self, name):
                check_int(f"each of {name} (--{name}, tokens)", n, low, MAX_EVAL_LENGTH)
        if any(not isinstance(d, int | float) or not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must lie in [0, 1], got {self.depths!r}")
        for name in ("haystack_dir", "babi_dir"):  # a typo used to fall back silently
            folder = getattr(self, name)
            if folder is not None and not Path(folder).is_dir():
                raise ValueError(f"{name} (--{name.replace('_', '-')}) {folder!r} is not a folder")

    def longest(self) -> int:
        """The longest context the settings ask for (0: only the tasks' own defaults)."""
        return max((*self.lengths, *self.distances), default=0)


SampleFn = Callable[[EvalSettings, Tokenizer], Iterable[dict]]
ScoreFn = Callable[[Evaluator, Tokenizer, dict, EvalSettings], dict]
SummarizeFn = Callable[[list[dict], EvalSettings], dict]
PlotFn = Callable[[dict, Path], None]


@dataclass(frozen=True)
class Task:
    name: str
    label: str  # how every output names it, e.g. "BABILong-style (bAbI + Gutenberg noise)"
    description: str
    samples: SampleFn  # generator or loader
    score: ScoreFn  # one sample -> its outcome (JSON-ready, with "score" in [0, 1])
    summarize: SummarizeFn
    plot: PlotFn  # result -> PNG file


TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is already registered")
    TASKS[task.name] = task
    return task


@dataclass(frozen=True)
class Scoring:
    """How a family of tasks scores one sample, sums up the outcomes and plots the result;
    the tasks of a family differ only in their samples (BABILong from the hub or built
    offline, the S-NIAH variants and the passkey)."""

    score: ScoreFn
    summarize: SummarizeFn
    plot: PlotFn

    def register(self, *, name: str, label: str, description: str, samples: SampleFn) -> Task:
        """Register the task ``name`` of this family (``register_task``)."""
        task = Task(name, label, description, samples, self.score, self.summarize, self.plot)
        return register_task(task)


def list_tasks() -> list[str]:
    return sorted(TASKS)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; available: {list_tasks()}")
    return TASKS[name]


def run_task(
    name: str,
    model: Any,
    tokenizer: Tokenizer,
    settings: EvalSettings | None = None,
    *,
    evaluator: Evaluator | None = None,
    progress: Callable[[int, dict], None] | None = None,
) -> dict:
    """Run task ``name`` on ``model``: samples -> outcomes -> summary. Before each sample
    the memory its length needs is checked (MemoryBudgetError unless ``settings.force``).
    Returns ``{"task", "label", "settings", "summary", "samples", "seconds"}``."""
    task = get_task(name)
    settings = settings or EvalSettings()
    if evaluator is None:
        evaluator = Evaluator(model, piece_size=settings.piece_size, force=settings.force)
    if settings.longest():  # the longest prompt, checked before the first one is built
        check_prompt_memory(settings.longest() + 64, settings.force)
        evaluator.ensure_memory(settings.longest() + 64)
    start = time.perf_counter()
    outcomes = []
    for index, sample in enumerate(task.samples(settings, tokenizer)):
        evaluator.ensure_memory(int(sample.get("num_tokens", 1)) + 64)
        outcome = task.score(evaluator, tokenizer, sample, settings)
        outcomes.append(outcome)
        if progress is not None:
            progress(index, outcome)
    return {
        "task": task.name,
        "label": task.label,
        "settings": dataclasses.asdict(settings),
        "summary": task.summarize(outcomes, settings),
        "samples": outcomes,
        "seconds": round(time.perf_counter() - start, 3),
    }


def without_prompt(sample: dict) -> dict:
    """A sample's JSON-worthy fields: the (long) prompt and token lists left out."""
    return {k: v for k, v in sample.items() if k not in ("prompt", "input_ids", "context")}


def mean_by(outcomes: list[dict], *keys: str) -> dict[tuple, float]:
    """Mean ``score`` of the outcomes grouped by the values of ``keys``."""
    groups: dict[tuple, list[float]] = {}
    for outcome in outcomes:
        groups.setdefault(tuple(outcome[k] for k in keys), []).append(float(outcome["score"]))
    return {key: sum(v) / len(v) for key, v in groups.items()}
