"""Needle in a haystack: RULER's single-needle tasks (S-NIAH) and the classic passkey.

RULER (Hsieh et al. 2024, ``scripts/data/synthetic/niah.py``):
  needle  "One of the special magic {types} for {key} is: {value}."  (plural, as RULER)
  prompt  "A special magic {type} is hidden within the following text. Make sure to memorize
          it. I will quiz you about the {type} afterwards.\\n{context}\\nWhat is the special
          magic {type} for {key} mentioned in the provided text?"
  answer prefix " The special magic {type} for {key} mentioned in the provided text is"
Keys are adjective-noun words; values 7-digit numbers, words or UUIDs. The ``noise`` haystack
repeats RULER's five sentences, one copy per line; the ``essay`` haystack is book sentences
(RULER: Paul Graham essays; here: the books of a folder the user names). The needle goes
after ``int(depth * n)`` of the n haystack units. ``length`` counts the prompt's tokens with
the answer prefix (RULER counts the generation budget in too).

Classic passkey (Mohtashami & Jaggi 2023): filler lines around "The pass key is {k}.
Remember it. {k} is the pass key." and the question "What is the pass key? The pass key is".
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..tokenizers import Tokenizer
from .base import IGNORE, Batch
from .haystack import book_sentences, largest_fitting, needle_word

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {types} for {key} is: {value}."
TEMPLATE = (
    "A special magic {type} is hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type} afterwards.\n{context}\n"
    "What is the special magic {type} for {key} mentioned in the provided text?"
)
ANSWER_PREFIX = " The special magic {type} for {key} mentioned in the provided text is"
PASSKEY_TASK = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there."
)
PASSKEY_NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
PASSKEY_QUESTION = "What is the pass key? The pass key is"


@dataclass(frozen=True)
class NiahVariant:
    haystack: str  # "noise" | "essay"
    value: str  # "number" | "word" | "uuid"
    label: str


VARIANTS: dict[str, NiahVariant] = {
    "sniah-pk": NiahVariant("noise", "number", "S-NIAH-PK (RULER niah_single_1: number in noise)"),
    "sniah-n": NiahVariant("essay", "number", "S-NIAH-N (RULER niah_single_2: number in books)"),
    "sniah-w": NiahVariant("essay", "word", "S-NIAH-W (word value in books)"),
    "sniah-uuid": NiahVariant("essay", "uuid", "S-NIAH-UUID (RULER niah_single_3: uuid in books)"),
}


def random_value(kind: str, rng: random.Random) -> str:
    if kind == "number":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "word":
        return needle_word(rng)
    if kind == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"value kind must be number, word or uuid, got {kind!r}")


def _fill(
    tokenizer: Tokenizer,
    length: int,
    render,
    unit_tokens: int,
    depth: float | None,
    distance: int | None,
) -> tuple[str, int, int, int]:
    """Place the needle and fit the haystack into ``length`` tokens. ``render(before, after)``
    renders the prompt with the haystack units numbered ``before`` ahead of the needle and
    ``after`` behind it, and returns (prompt, text ahead of the needle).

    depth: units 0..n-1 in order, the needle after ``int(depth * n)`` of them (RULER).
    distance: units 0..m-1 right after the needle, m as large as fits in ``distance`` tokens
    to the prompt's end; then units m, m+1, ... ahead of it until the prompt is full.
    Returns (prompt, units, units ahead of the needle, needle position in tokens)."""
    if (depth is None) == (distance is None):
        raise ValueError("give exactly one of depth and distance")
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must lie in [0, 1], got {depth}")
    guess = (length - len(tokenizer.encode(render(range(0), range(0))[0]))) // max(1, unit_tokens)
    if depth is not None:
        layout = lambda n: (range(int(depth * n)), range(int(depth * n), n))  # noqa: E731
    else:
        if not isinstance(distance, int) or distance < 1:
            raise ValueError(f"distance must be an int >= 1, got {distance!r}")

        def tail_tokens(m: int) -> int:
            prompt, before = render(range(0), range(m))
            return len(tokenizer.encode(prompt)) - len(tokenizer.encode(before))

        after = largest_fitting(tail_tokens, distance, length, distance // max(1, unit_tokens))
        if after < 0:
            raise ValueError(f"distance={distance} is shorter than the needle and question")
        layout = lambda b: (range(after, after + b), range(after))  # noqa: E731
    count = lambda n: len(tokenizer.encode(render(*layout(n))[0]))  # noqa: E731
    n = largest_fitting(count, length, length, guess)
    if n < 0:
        raise ValueError(f"length={length} is too short for the prompt at this depth/distance")
    before, after_units = layout(n)
    prompt, before_needle = render(before, after_units)
    units = len(before) + len(after_units)
    return prompt, units, len(before), len(tokenizer.encode(before_needle))


def _record(tokenizer: Tokenizer, prompt: str, n: int, at: int, needle_token: int) -> dict:
    num_tokens = len(tokenizer.encode(prompt))
    return {
        "prompt": prompt,
        "num_tokens": num_tokens,
        "haystack_units": n,
        "needle_unit": at,
        "needle_token": needle_token,
        "distance": num_tokens - needle_token,
    }


def build_niah_sample(
    tokenizer: Tokenizer,
    variant: str,
    length: int,
    rng: random.Random,
    *,
    depth: float | None = None,
    distance: int | None = None,
    haystack_dir: str | None = None,
    start_sentence: int = 0,
) -> dict:
    """One S-NIAH prompt of at most ``length`` tokens, the needle at ``depth`` (fraction of
    the haystack units before it) or about ``distance`` tokens from the prompt's end. Returns
    a sample dict: ``prompt`` (ends with the answer prefix), ``answers`` [value], ``key``,
    ``num_tokens``, ``needle_token`` (where the needle starts) and ``distance`` (needle start
    to prompt end, in tokens)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    spec = VARIANTS[variant]
    key, value = needle_word(rng), random_value(spec.value, rng)
    needle = NEEDLE.format(types=spec.value + "s", key=key, value=value)
    head, tail = TEMPLATE.format(type=spec.value, key=key, context="\x00").split("\x00")
    tail += ANSWER_PREFIX.format(type=spec.value, key=key)
    if spec.haystack == "noise":
        units, joiner = None, "\n"
    elif haystack_dir is None:
        raise ValueError(f"{variant} needs haystack_dir: a folder of book *.txt files")
    else:
        units, joiner = book_sentences(str(haystack_dir)), " "

    def unit(i: int) -> str:
        return NOISE if units is None else units[(start_sentence + i) % len(units)]

    def render(ahead: range, behind: range) -> tuple[str, str]:
        before = head + "".join(unit(i) + joiner for i in ahead)
        return before + joiner.join([needle, *(unit(i) for i in behind)]) + tail, before

    unit_tokens = len(tokenizer.encode(joiner + unit(0)))  # a first guess of the haystack size
    filled = _fill(tokenizer, length, render, unit_tokens, depth, distance)
    return {
        **_record(tokenizer, *filled),
        "answers": [value],
        "key": key,
        "variant": variant,
        "length": length,
        "depth": depth if depth is not None else round(filled[2] / max(1, filled[1]), 4),
    }


def build_passkey_sample(
    tokenizer: Tokenizer,
    length: int,
    rng: random.Random,
    *,
    depth: float | None = None,
    distance: int | None = None,
) -> dict:
    """The classic passkey prompt of at most ``length`` tokens, the key line at ``depth`` of
    the filler or about ``distance`` tokens from the end; fields as ``build_niah_sample``."""
    key = str(rng.randint(1, 50000))
    info = PASSKEY_NEEDLE.format(key=key)

    def render(ahead: range, behind: range) -> tuple[str, str]:
        before = PASSKEY_TASK + "\n" + " ".join([NOISE] * len(ahead)) + "\n"
        after = "\n" + " ".join([NOISE] * len(behind)) + "\n"
        return before + info + after + PASSKEY_QUESTION, before

    unit_tokens = len(tokenizer.encode(" " + NOISE))
    filled = _fill(tokenizer, length, render, unit_tokens, depth, distance)
    return {
        **_record(tokenizer, *filled),
        "answers": [key],
        "variant": "passkey",
        "length": length,
        "depth": depth if depth is not None else round(filled[2] / max(1, filled[1]), 4),
    }


# --- batches ---------------------------------------------------------------------------------


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
