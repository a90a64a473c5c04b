"""BABILong: the real benchmark through Hugging Face ``datasets`` (``RMT-team/babilong``: one
config per length ``0k``, ``1k``, ..., one split per task ``qa1`` ..., columns ``input``,
``question``, ``target``) and the offline BABILong-style set of ``babi.py``; both scored by
the benchmark's own metric (``metrics.babilong_compare_answers``).

The model sees BABILong's default template with no instruction, examples or post-prompt
(``"<context>\\n{input}\\n</context>\\nQuestion: {question}"``) followed by ``"\\nAnswer:"``,
and answers in one of two honest ways: ``likelihood`` (the label of the task's label set whose
tokens, after a space, are most likely) or ``greedy`` (its argmax continuation). Either answer
then goes through the benchmark's metric, so a label that also occurs in the question never
counts.
"""

from __future__ import annotations

import random
from pathlib import Path

from ..extras import require
from ..tasks.babi import (
    PROMPT_RESERVE,
    STYLE_LABEL,
    BabiQuestion,
    babi_file,
    build_style_sample,
    parse_babi,
)
from ..tasks.babilong import ANSWER_PREFIX, TEMPLATE, format_prompt  # noqa: F401
from ..tasks.haystack import book_sentences
from ..tokenizers import Tokenizer, say_network
from .inference import Evaluator
from .metrics import babilong_compare_answers, babilong_labels, percent
from .plots import heatmap, length_label, plot_title
from .registry import EvalSettings, Scoring, mean_by, without_prompt

COLUMNS = ("input", "question", "target")
DEFAULT_LENGTHS = (0, 1024, 2048, 4096)


def config_name(length: int | str) -> str:
    """A BABILong config name: 0 -> "0k", 1024 -> "1k", "16k" stays."""
    if isinstance(length, str):
        return length
    if length % 1024:
        raise ValueError(f"BABILong lengths are multiples of 1024 tokens, got {length}")
    return f"{length // 1024}k"


def load_babilong(
    dataset: str, length: int | str, task: str, limit: int | None = None
) -> list[dict]:
    """Rows ``{input, question, target}`` of BABILong config ``length``, split ``task``, from
    the hub name or a local copy in the same layout. Errors name what to get and where."""
    datasets = require("datasets", "loading BABILong (Hugging Face datasets)")
    config = config_name(length)
    if not Path(dataset).exists():
        say_network(f"BABILong {dataset!r}")
    try:
        data = datasets.load_dataset(dataset, name=config, split=task)
    except Exception as err:  # datasets raises many types (network, missing config / split)
        raise ValueError(
            f"cannot load BABILong {dataset!r} config {config!r} split {task!r}: {err}. "
            "BABILong is the Hugging Face dataset RMT-team/babilong; without hub access, "
            "download it where you have access (huggingface-cli download RMT-team/babilong "
            "--repo-type dataset --local-dir DIR) and pass --dataset DIR, or build "
            "BABILong-style samples offline with --task babilong-style"
        ) from err
    missing = [c for c in COLUMNS if c not in data.column_names]
    if missing:
        raise ValueError(f"{dataset} {config}/{task} lacks BABILong columns {missing}")
    rows = data if limit is None else data.select(range(min(limit, len(data))))
    return [{c: row[c] for c in COLUMNS} for row in rows]


def answer(
    evaluator: Evaluator, tokenizer: Tokenizer, prompt: str, task: str, settings: EvalSettings
) -> tuple[str, dict]:
    """The model's answer text to a BABILong prompt, and how it was chosen."""
    prompt_ids = tokenizer.encode(prompt)
    if settings.scoring == "likelihood":
        labels = sorted(babilong_labels(task))
        scores = evaluator.rank_candidates(prompt_ids, [tokenizer.encode(" " + x) for x in labels])
        best = max(range(len(labels)), key=scores.__getitem__)
        return labels[best], {"label_logprobs": dict(zip(labels, scores))}
    budget = settings.max_new_tokens or 16
    return tokenizer.decode(evaluator.greedy(prompt_ids, budget)), {}


def _score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    prompt = format_prompt(sample["context"], sample["question"])
    output, details = answer(evaluator, tokenizer, prompt, sample["task"], settings)
    correct = babilong_compare_answers(
        sample["target"], output, sample["question"], babilong_labels(sample["task"])
    )
    return {**without_prompt(sample), "output": output, **details, "score": float(correct)}


def _hub_samples(settings: EvalSettings, tokenizer: Tokenizer):
    for length in settings.lengths or DEFAULT_LENGTHS:
        for task in settings.babi_tasks:
            for index, row in enumerate(
                load_babilong(settings.dataset, length, task, settings.samples)
            ):
                context = row["input"]
                yield {
                    "task": task,
                    "length": length,
                    "index": index,
                    "context": context,
                    "question": row["question"],
                    "target": row["target"],
                    "num_tokens": len(tokenizer.encode(format_prompt(context, row["question"]))),
                }


def _style_samples(settings: EvalSettings, tokenizer: Tokenizer):
    if settings.babi_dir is None or settings.haystack_dir is None:
        raise ValueError(
            "babilong-style needs --babi-dir (bAbI qaN_*_test.txt files, e.g. "
            "../shared/data/babi) and --haystack-dir (book *.txt files, e.g. "
            "../shared/data/gutenberg)"
        )
    if not settings.babi_tasks:
        raise ValueError("babi_tasks (--babi-tasks) is empty: name at least one of qa1-qa5")
    asked = {}  # every file read and every length checked before the first sample is built
    for task in settings.babi_tasks:
        babilong_labels(task)  # only qa1-qa5 have the benchmark's label sets
        questions = parse_babi(babi_file(settings.babi_dir, task, settings.babi_split))
        asked[task] = questions[: settings.samples]
    lengths = _style_lengths(settings, tokenizer, asked)  # per task
    sentences = book_sentences(str(settings.haystack_dir))
    for task, questions in asked.items():
        for length in lengths[task]:
            for index, item in enumerate(questions):
                rng = random.Random(f"{settings.seed}:{task}:{length}:{index}")
                sample = build_style_sample(item, tokenizer, length, sentences, rng)
                prompt = format_prompt(sample["context"], sample["question"])
                yield {
                    **sample,
                    "task": task,
                    "index": index,
                    "source": STYLE_LABEL,
                    "num_tokens": len(tokenizer.encode(prompt)),
                }


def _style_lengths(
    settings: EvalSettings, tokenizer: Tokenizer, asked: dict[str, list[BabiQuestion]]
) -> dict[str, tuple[int, ...]]:
    """The lengths to build per task: each must hold the prompt reserve and the facts of
    every question asked (below that no noise is added and the prompt would be reported at
    a length it does not have), or be 0 (the facts alone). A given length that does not is
    an error naming --lengths, the task and its minimum; of the default lengths each task
    keeps those that fit it (the summary leaves the others' cells empty)."""
    chosen = {}
    for task, items in asked.items():
        facts = max(sum(len(tokenizer.encode(" " + f)) for f in item.facts) for item in items)
        minimum = PROMPT_RESERVE + facts
        if not settings.lengths:
            chosen[task] = tuple(n for n in DEFAULT_LENGTHS if n == 0 or n >= minimum)
            continue
        for length in settings.lengths:
            if 0 < length < minimum:
                raise ValueError(
                    f"babilong-style --lengths {length} cannot hold the {PROMPT_RESERVE}-token "
                    f"prompt reserve plus the facts of {task} ({facts} tokens for the "
                    f"questions asked): give 0 (the facts alone) or a length >= {minimum}"
                )
        chosen[task] = tuple(settings.lengths)
    return chosen


def _summarize(outcomes: list[dict], settings: EvalSettings) -> dict:
    lengths = sorted({o["length"] for o in outcomes})
    tasks = sorted({o["task"] for o in outcomes}, key=lambda t: int(t[2:]))
    cells = mean_by(outcomes, "task", "length")
    grid = [[percent(cells.get((t, n))) for n in lengths] for t in tasks]
    mean_row = [
        percent(sum(cells[(t, n)] for t in tasks) / len(tasks))
        if all((t, n) in cells for t in tasks)
        else None
        for n in lengths
    ]
    return {
        "tasks": tasks,
        "lengths": lengths,
        "accuracy": grid,
        "mean_over_tasks": mean_row,
        "scoring": settings.scoring,
        "metric": "BABILong compare_answers x100",
    }


def _plot(result: dict, path: Path) -> None:
    summary = result["summary"]
    heatmap(
        [*summary["accuracy"], summary["mean_over_tasks"]],
        [*summary["tasks"], "mean"],
        [length_label(n) for n in summary["lengths"]],
        path,
        title=plot_title(result, summary["scoring"]),
        xlabel="length (tokens)",
        ylabel="task",
    )


BABILONG = Scoring(_score, _summarize, _plot)  # the hub's samples and the offline ones
BABILONG.register(
    name="babilong",
    label="BABILong (RMT-team/babilong)",
    description="the BABILong benchmark from Hugging Face (or a local copy), qa1-qa5",
    samples=_hub_samples,
)
BABILONG.register(
    name="babilong-style",
    label=STYLE_LABEL,
    description="BABILong-style samples built offline from bAbI files and book text",
    samples=_style_samples,
)
