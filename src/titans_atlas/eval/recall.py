"""Recall at a controlled distance, as seeded batches for training and for evaluation.

Every function returns ``Batch(input_ids [B, T], labels [B, T])`` (int64) with the labels
already shifted -- ``labels[:, t]`` is the token that should follow ``input_ids[:, t]``, -100
where nothing is scored -- so ``cross_entropy(logits.flatten(0, 1), labels.flatten(),
ignore_index=-100)`` is the training loss and ``batch_accuracy`` the evaluation.

* ``kv_recall_batch``: token ids only, any vocabulary. Noise tokens, a few key-value pairs,
  and at the end the query key of one pair whose value lies exactly ``distance`` tokens back.
* ``passkey_batch`` / ``sniah_batch`` / ``babilong_style_batch``: text prompts of the
  evaluation tasks through a tokenizer, the answer's tokens labelled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..tokenizer import Tokenizer
from .babi import babi_file, build_style_sample, parse_babi
from .babilong import format_prompt
from .haystack import book_sentences
from .inference import DEFAULT_PIECE, Evaluator
from .mqar import IGNORE, Batch, labelled_accuracy, mqar_batch
from .niah import build_niah_sample, build_passkey_sample
from .plots import curves
from .registry import EvalSettings, Task, mean_by, register_task

__all__ = [
    "Batch",
    "babilong_style_batch",
    "batch_accuracy",
    "kv_recall_batch",
    "mqar_batch",
    "passkey_batch",
    "prompt_answer_batch",
    "sniah_batch",
]


def kv_recall_batch(
    batch_size: int,
    seq_len: int,
    distance: int,
    vocab_size: int,
    *,
    seed: int,
    num_pairs: int = 1,
) -> Batch:
    """Key-value recall with the answer ``distance`` tokens back.

    Keys are drawn from [1, V/2) and values from [V/2, V) (as MQAR), noise from the keys'
    range minus this sequence's keys, so each key occurs once before its query. The queried
    pair's value sits at position ``seq_len - 1 - distance`` (its key just before); the query
    key is the last input token and its label is the value. ``num_pairs - 1`` distractor
    pairs sit at random other places. A model that attends over W tokens sees the value only
    when ``distance < W``."""
    if distance < 1 or seq_len < distance + 2:
        raise ValueError(
            f"need 1 <= distance <= seq_len - 2, got distance={distance}, seq_len={seq_len}"
        )
    if num_pairs < 1 or 2 * num_pairs > seq_len - 1:
        raise ValueError(f"num_pairs must lie in [1, (seq_len - 1) / 2], got {num_pairs}")
    if vocab_size // 2 - 1 <= num_pairs:
        raise ValueError(f"vocab_size={vocab_size} leaves no noise tokens for {num_pairs} pairs")
    rng = np.random.default_rng(seed)
    inputs = np.zeros((batch_size, seq_len), dtype=np.int64)
    labels = np.full((batch_size, seq_len), IGNORE, dtype=np.int64)
    value_at = seq_len - 1 - distance
    for row in range(batch_size):
        keys = rng.choice(np.arange(1, vocab_size // 2), num_pairs, replace=False)
        values = rng.integers(vocab_size // 2, vocab_size, num_pairs)
        noise = np.setdiff1d(np.arange(1, vocab_size // 2), keys)
        inputs[row] = rng.choice(noise, seq_len)
        starts = [value_at - 1, *_free_pair_starts(rng, seq_len - 1, value_at - 1, num_pairs - 1)]
        for start, key, value in zip(starts, keys, values):
            inputs[row, start], inputs[row, start + 1] = key, value
        inputs[row, -1], labels[row, -1] = keys[0], values[0]
    return Batch(torch.from_numpy(inputs), torch.from_numpy(labels))


def _free_pair_starts(rng: np.random.Generator, end: int, taken: int, count: int) -> list[int]:
    """``count`` starts of 2-token slots in [0, end) that overlap neither each other nor the
    slot at ``taken``."""
    slots = [s for s in range(0, end - 1, 2) if abs(s - taken) > 1]
    if len(slots) < count:
        raise ValueError(f"no room for {count} distractor pairs in {end} tokens")
    return sorted(rng.choice(slots, count, replace=False).tolist())


def prompt_answer_batch(
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    answers: Sequence[str],
    length: int,
    pad_id: int | None = None,
) -> Batch:
    """Prompt ids then ``encode(" " + answer)``, the answer's tokens labelled, right-padded
    to ``length`` with ``pad_id`` (default: the tokenizer's end-of-text id, else 0) and
    label -100 -- padding after the answer cannot change a causal model's scored logits."""
    if len(prompts) != len(answers) or not prompts:
        raise ValueError("prompts and answers must be non-empty and of the same length")
    pad = pad_id if pad_id is not None else (tokenizer.eos_id or 0)
    inputs = torch.full((len(prompts), length), pad, dtype=torch.long)
    labels = torch.full((len(prompts), length), IGNORE, dtype=torch.long)
    for row, (prompt, answer) in enumerate(zip(prompts, answers)):
        prompt_ids, answer_ids = tokenizer.encode(prompt), tokenizer.encode(" " + answer)
        sequence = prompt_ids + answer_ids
        if len(sequence) - 1 > length:
            raise ValueError(f"sample {row} takes {len(sequence) - 1} tokens > length={length}")
        inputs[row, : len(sequence) - 1] = torch.tensor(sequence[:-1])
        first = len(prompt_ids) - 1  # the position that predicts the answer's first token
        labels[row, first : first + len(answer_ids)] = torch.tensor(answer_ids)
    return Batch(inputs, labels)


def _answer_room(tokenizer: Tokenizer) -> int:
    return len(tokenizer.encode(" 0123456789abcdef-0123456789abcdef-0123")) + 1


def passkey_batch(
    tokenizer: Tokenizer,
    length: int,
    batch_size: int,
    *,
    seed: int,
    depth: float | None = None,
    distance: int | None = None,
) -> Batch:
    """Classic passkey prompts (key line at ``depth`` or ``distance`` tokens from the end)
    with the key's tokens labelled; ``length`` tokens in all."""
    samples = [
        build_passkey_sample(
            tokenizer,
            length - _answer_room(tokenizer),
            random.Random(f"{seed}:{i}"),
            depth=depth,
            distance=distance,
        )
        for i in range(batch_size)
    ]
    return prompt_answer_batch(
        tokenizer, [s["prompt"] for s in samples], [s["answers"][0] for s in samples], length
    )


def sniah_batch(
    tokenizer: Tokenizer,
    variant: str,
    length: int,
    batch_size: int,
    *,
    seed: int,
    depth: float | None = None,
    distance: int | None = None,
    haystack_dir: str | None = None,
) -> Batch:
    """S-NIAH prompts (``sniah-pk`` / ``-n`` / ``-w`` / ``-uuid``) with the value labelled;
    each sample starts its book haystack at a random sentence."""
    prompts, answers = [], []
    sentences = len(book_sentences(str(haystack_dir))) if haystack_dir else 1
    for i in range(batch_size):
        rng = random.Random(f"{seed}:{variant}:{i}")
        sample = build_niah_sample(
            tokenizer,
            variant,
            length - _answer_room(tokenizer),
            rng,
            depth=depth,
            distance=distance,
            haystack_dir=haystack_dir,
            start_sentence=rng.randrange(sentences),
        )
        prompts.append(sample["prompt"])
        answers.append(sample["answers"][0])
    return prompt_answer_batch(tokenizer, prompts, answers, length)


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


def batch_accuracy(model, batch: Batch, piece_size: int = DEFAULT_PIECE) -> float:
    """Fraction of a batch's labelled tokens the model predicts by argmax (a multi-token
    answer counts each of its tokens)."""
    logits = Evaluator(model, piece_size=piece_size, check_budget=False).all_logits(batch.input_ids)
    correct, total = labelled_accuracy(logits, batch.labels)
    return correct / max(1, total)


# --- task ------------------------------------------------------------------------------------

DEFAULT_DISTANCES = (16, 64, 256)


def _kv_samples(settings: EvalSettings, tokenizer: Tokenizer):
    vocab = int(settings.extra.get("vocab_size", tokenizer.vocab_size))
    pairs = settings.kv_pairs or 1
    for distance in settings.distances or DEFAULT_DISTANCES:
        seq_len = max(settings.lengths) if settings.lengths else distance + 2 * pairs + 8
        batch = kv_recall_batch(
            settings.samples,
            seq_len,
            distance,
            vocab,
            seed=settings.seed + distance,
            num_pairs=pairs,
        )
        for index in range(settings.samples):
            yield {
                "distance": distance,
                "length": seq_len,
                "kv_pairs": pairs,
                "vocab_size": vocab,
                "index": index,
                "input_ids": batch.input_ids[index].tolist(),
                "labels": batch.labels[index].tolist(),
                "num_tokens": seq_len,
            }


def _kv_score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    if sample["vocab_size"] > evaluator.vocab_size:
        raise ValueError(
            f"vocab_size {sample['vocab_size']} exceeds the model's {evaluator.vocab_size}"
        )
    logits = evaluator.all_logits(torch.tensor([sample["input_ids"]]))
    prediction = int(logits[0, -1].argmax())
    fields = ("distance", "length", "kv_pairs", "vocab_size", "index")
    return {
        **{k: sample[k] for k in fields},
        "target": sample["labels"][-1],
        "prediction": prediction,
        "window": getattr(evaluator.model.config, "window", None),
        "score": float(prediction == sample["labels"][-1]),
    }


def _kv_summarize(outcomes: list[dict], settings: EvalSettings) -> dict:
    distances = sorted({o["distance"] for o in outcomes})
    by_distance = mean_by(outcomes, "distance")
    window = outcomes[0]["window"] if outcomes else None
    return {
        "distances": distances,
        "distance_in_windows": [d / window for d in distances] if window else None,
        "accuracy": [round(100 * by_distance[(d,)], 2) for d in distances],
        "chance": round(100 / max(1, outcomes[0]["vocab_size"] // 2), 3) if outcomes else None,
        "window": window,
        "metric": "accuracy x100 of the argmax at the query",
    }


def _kv_plot(result: dict, path: Path) -> None:
    summary = result["summary"]
    in_windows = summary["distance_in_windows"]
    curves(
        {"accuracy": (in_windows or summary["distances"], summary["accuracy"])},
        path,
        title=f"{result['label']}\n{result.get('checkpoint', {}).get('name', '')}".strip(),
        xlabel="distance (attention windows)" if in_windows else "distance (tokens)",
        ylabel="accuracy (%)",
        logx=True,
        vlines=[(1.0, "window")] if in_windows else (),
    )


register_task(
    Task(
        name="kv-recall",
        label="Key-value recall at controlled distance",
        description="recall of a value a set number of tokens back, for models trained on it",
        samples=_kv_samples,
        score=_kv_score,
        summarize=_kv_summarize,
        plot=_kv_plot,
    )
)
