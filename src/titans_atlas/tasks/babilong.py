"""BABILong-style question answering as a training task (``data.source = "task:babilong_style"``).

Each row is one bAbI question (from the ``split`` file of ``task`` in ``babi_dir``; validation
reads ``val_split``) with its facts hidden in book sentences from ``haystack_dir``, laid out
exactly as ``titans eval --task babilong-style`` prompts the model
(``format_prompt``), then a space and the answer. Only the answer's tokens are
scored, so a model fine-tuned here on short rows can be evaluated with the evaluation's label
ranking on rows many times longer.

A row fills ``seq_len + 1`` tokens: the noise budget is what the prompt, the facts and the
answer leave; when the facts alone overflow, the context loses its oldest tokens; a row left
short (tokenisation at the cut) is padded with spaces on the left, unscored.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import torch

from ..tokenizers import ByteTokenizer, Tokenizer
from .babi import babi_file, build_style_sample, parse_babi
from .base import IGNORE, Batch
from .haystack import book_sentences
from .needles import prompt_answer_batch

TEMPLATE = "<context>\n{context}\n</context>\nQuestion: {question}"
ANSWER_PREFIX = "\nAnswer:"

# The answer sets of BABILong's metrics.py (qa1-qa4 locations; qa5 people and objects).
_LOCATIONS = frozenset({"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"})
BABILONG_LABELS: dict[str, frozenset[str]] = {
    "qa1": _LOCATIONS,
    "qa2": _LOCATIONS,
    "qa3": _LOCATIONS,
    "qa4": _LOCATIONS,
    "qa5": frozenset({"Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"}),
}


def format_prompt(context: str, question: str) -> str:
    """BABILong's DEFAULT_TEMPLATE with empty instruction / examples / post-prompt, stripped
    as its ``get_formatted_input`` does, then our answer prefix."""
    return TEMPLATE.format(context=context, question=question).strip() + ANSWER_PREFIX


def babilong_labels(task: str) -> frozenset[str]:
    """The answer labels of a BABILong task (qa1-qa5); ValueError for the others."""
    if task not in BABILONG_LABELS:
        raise ValueError(
            f"task {task!r} has no label set; the BABILong metric defines {sorted(BABILONG_LABELS)}"
        )
    return BABILONG_LABELS[task]


@dataclass(frozen=True)
class BabilongStyle:
    """Rows of ``seq_len`` tokens: ``sample(B, generator)`` -> ``inputs [B, T]`` and
    ``labels [B, T]`` (int64; the answer's tokens at the end of each row, -100 elsewhere)."""

    seq_len: int
    babi_dir: str = ""
    haystack_dir: str = ""
    task: str = "qa1"
    split: str = "train"
    val_split: str = "test"  # validation asks questions training never saw
    tokenizer: Tokenizer = field(default_factory=ByteTokenizer)

    def __post_init__(self) -> None:
        for name in ("babi_dir", "haystack_dir", "task", "split", "val_split"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(
                    f"data.task_args.{name} must be a string, got {getattr(self, name)!r}"
                )
        if not all(hasattr(self.tokenizer, a) for a in ("encode", "decode", "vocab_size")):
            raise ValueError(
                "data.task_args.tokenizer must be a Tokenizer object (leave it out for the "
                f"byte tokenizer), got {self.tokenizer!r}"
            )
        for name in ("babi_dir", "haystack_dir"):
            if not getattr(self, name):
                raise ValueError(
                    f"data.task_args.{name} is required for babilong_style (e.g. "
                    f"../shared/data/{'babi' if name == 'babi_dir' else 'gutenberg'})"
                )
        babilong_labels(self.task)  # ValueError for tasks without the benchmark's labels
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int):
            raise ValueError(f"train.seq_len must be an integer >= 64, got {self.seq_len!r}")
        if self.seq_len < 64:
            raise ValueError(f"train.seq_len must be >= 64 for babilong_style, got {self.seq_len}")
        for split in (self.split, self.val_split):  # missing files fail now, not after training
            questions = tuple(parse_babi(babi_file(self.babi_dir, self.task, split)))  # empty too
            if split == self.split:
                self.__dict__["questions"] = questions  # the cached_property's value
        if not any(Path(self.haystack_dir).glob("*.txt")):
            raise ValueError(
                f"data.task_args.haystack_dir={self.haystack_dir!r} holds no *.txt book files"
            )

    def validation(self) -> BabilongStyle:
        """The same rows built from the ``val_split`` file: a run's validation accuracy is
        then not inflated by stories the model has memorised."""
        return replace(self, split=self.val_split)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @cached_property
    def questions(self) -> tuple:
        return tuple(parse_babi(babi_file(self.babi_dir, self.task, self.split)))

    @cached_property
    def sentences(self) -> tuple[str, ...]:
        return book_sentences(self.haystack_dir)

    def row(self, rng: random.Random) -> tuple[list[int], int]:
        """The ``seq_len + 1`` ids of one row and how many of them (at the end) are the answer."""
        item = self.questions[rng.randrange(len(self.questions))]
        answer = self.tokenizer.encode(" " + item.answer)
        overhead = len(self.tokenizer.encode(format_prompt("", item.question))) + len(answer)
        sample = build_style_sample(
            item, self.tokenizer, self.seq_len + 1, self.sentences, rng, prompt_reserve=overhead
        )
        ids = self.tokenizer.encode(format_prompt(sample["context"], item.question)) + answer
        ids = ids[-(self.seq_len + 1) :]
        pad = self.tokenizer.encode(" ") * (self.seq_len + 1 - len(ids))
        return pad + ids, len(answer)

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` rows, each from a Python RNG seeded by a draw of ``generator``."""
        seeds = torch.randint(2**62, (batch_size,), generator=generator).tolist()
        rows, labels = [], torch.full((batch_size, self.seq_len), IGNORE, dtype=torch.long)
        for index, seed in enumerate(seeds):
            ids, answer_tokens = self.row(random.Random(seed))
            rows.append(ids)
            labels[index, -answer_tokens:] = torch.tensor(ids[-answer_tokens:])
        tokens = torch.tensor(rows, dtype=torch.long)  # [B, seq_len + 1]
        return tokens[:, :-1].contiguous(), labels


def babilong_style_batch(
    tokenizer: Tokenizer,
    babi_dir: str,
    haystack_dir: str,
    task: str,
    context_length: int,
    batch_size: int,
    *,
    seed: int,
    split: str = "train",
    length: int | None = None,
) -> Batch:
    """BABILong-style prompts (random questions of the bAbI ``split`` file, facts in book
    noise of nominal ``context_length``) with the answer labelled, padded to ``length``
    (default: the longest sample)."""
    questions = parse_babi(babi_file(babi_dir, task, split))
    sentences = book_sentences(str(haystack_dir))
    rng = random.Random(f"{seed}:{task}:{context_length}")
    prompts, answers = [], []
    for _ in range(batch_size):
        item = questions[rng.randrange(len(questions))]
        sample = build_style_sample(item, tokenizer, context_length, sentences, rng)
        prompts.append(format_prompt(sample["context"], sample["question"]))
        answers.append(sample["target"])
    longest = max(
        len(tokenizer.encode(p)) + len(tokenizer.encode(" " + a)) - 1
        for p, a in zip(prompts, answers)
    )
    return prompt_answer_batch(tokenizer, prompts, answers, length or longest)
