"""bAbI stories and BABILong-style samples built from them offline.

Parsing follows BABILong's ``get_dataset_df``: a story is the lines from an id of 1 to the
next; every question makes one sample whose facts are the story's statements before it
(earlier questions dropped). Building follows its ``NoiseInjectionDataset`` and
``SentenceSampler``: book text is split into sentences (untrained Punkt), sentences under
``min_sentence_tokens`` tokens are dropped, sentences are taken in order until the noise
budget (the context length minus the facts' tokens) is reached and the last one is cut to fit;
each fact goes into a gap between noise sentences drawn at random (with replacement, as
``numpy``'s ``choice``) and sorted, so facts keep their order. Question and answer are not part
of the context. Samples made here are "BABILong-style (bAbI + Gutenberg noise)", not BABILong.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..tokenizers import Tokenizer
from ..validation import read_text_file

STYLE_LABEL = "BABILong-style (bAbI + Gutenberg noise)"
PROMPT_RESERVE = 300  # tokens a BABILong length leaves for the prompt around the context


@dataclass(frozen=True)
class BabiQuestion:
    facts: tuple[str, ...]
    question: str
    answer: str
    supporting: tuple[int, ...]  # indices into ``facts``


def babi_file(babi_dir: str | Path, task: str, split: str = "test") -> Path:
    """The bAbI file of ``task`` (``qa1`` ...) and ``split`` (``test`` | ``train``) in
    ``babi_dir`` or its ``en-10k`` folder: ``qaN_*_{split}.txt`` (else ``..._{split}_1k.txt``).
    ValueError naming what to get when it is missing."""
    if not re.fullmatch(r"qa\d+", task):
        raise ValueError(f"task must look like 'qa1', got {task!r}")
    if split not in ("test", "train"):
        raise ValueError(f"split must be 'test' or 'train', got {split!r}")
    for folder in (Path(babi_dir), Path(babi_dir) / "en-10k"):
        for pattern in (f"{task}_*_{split}.txt", f"{task}_*_{split}_1k.txt"):
            found = sorted(folder.glob(pattern))
            if found:
                return found[0]
    raise ValueError(
        f"no bAbI file {task}_*_{split}.txt in {str(babi_dir)!r}: get the bAbI tasks v1.2 "
        "(Facebook research, tasks_1-20_v1-2/en-10k; this repository's tests use "
        "../shared/data/babi) and pass that folder"
    )


def parse_babi(path: str | Path) -> list[BabiQuestion]:
    """Every question of a bAbI file as a sample with the statements before it; ValueError
    naming the file when it holds none."""
    samples: list[BabiQuestion] = []
    facts: list[tuple[int, str]] = []
    for number, line in enumerate(read_text_file(path, "bAbI file").splitlines(), 1):
        if not line.strip():
            continue
        ident, _, text = line.partition(" ")
        if not ident.isdigit():
            raise ValueError(f"{path}:{number}: a bAbI line starts with its id, got {line!r}")
        if int(ident) == 1:
            facts = []
        if "\t" not in text:
            facts.append((int(ident), text.strip()))
            continue
        question, answer, support = [*text.split("\t"), "", ""][:3]
        ids = [int(n) for n in support.split()]
        index_of = {line_id: i for i, (line_id, _) in enumerate(facts)}
        samples.append(
            BabiQuestion(
                facts=tuple(fact for _, fact in facts),
                question=question.strip(),
                answer=answer.strip(),
                supporting=tuple(index_of[i] for i in ids if i in index_of),
            )
        )
    if not samples:
        raise ValueError(
            f"bAbI file {str(path)!r} holds no questions (lines 'ID question<TAB>answer<TAB>"
            "supporting ids'): pass a bAbI tasks v1.2 qaN_*_{test,train}.txt file"
        )
    return samples


def noise_sentences(
    tokenizer: Tokenizer,
    sentences: tuple[str, ...],
    budget: int,
    start: int,
    min_sentence_tokens: int = 10,
) -> list[list[int]]:
    """Token ids (each with a leading space) of book sentences from index ``start`` on
    (wrapping), sentences under ``min_sentence_tokens`` tokens skipped, until ``budget``
    tokens; the last one is cut so the total is exactly ``budget``."""
    if budget <= 0:
        return []
    if not sentences:
        raise ValueError("no book sentences to draw noise from")
    picked, total, index, skipped = [], 0, start, 0
    while total < budget:
        ids = tokenizer.encode(" " + sentences[index % len(sentences)])
        index += 1
        if len(ids) < min_sentence_tokens:
            skipped += 1
            if skipped > len(sentences):
                raise ValueError(f"no book sentence has {min_sentence_tokens} tokens or more")
            continue
        picked.append(ids[: budget - total])
        total += len(picked[-1])
    return picked


def build_style_sample(
    item: BabiQuestion,
    tokenizer: Tokenizer,
    length: int,
    sentences: tuple[str, ...],
    rng: random.Random,
    prompt_reserve: int = PROMPT_RESERVE,
    min_sentence_tokens: int = 10,
) -> dict:
    """One BABILong-style sample of nominal ``length`` tokens (0: the facts alone; else the
    context gets ``length - prompt_reserve`` tokens). Returns ``context``, ``question``,
    ``target``, ``fact_positions`` (the noise gap of each fact) and ``fact_tokens`` (the token
    offset of each fact in the context)."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    facts = [tokenizer.encode(" " + fact) for fact in item.facts]
    budget = 0 if length == 0 else max(0, length - prompt_reserve - sum(map(len, facts)))
    start = rng.randrange(len(sentences)) if sentences else 0
    noise = noise_sentences(tokenizer, sentences, budget, start, min_sentence_tokens)
    gaps = sorted(rng.choice(range(len(noise) + 1)) for _ in facts)
    pieces: list[list[int]] = [[] for _ in range(len(noise) + 1)]
    for fact, gap in zip(facts, gaps):
        pieces[gap].append(fact)
    for i, sentence in enumerate(noise):
        pieces[i].append(sentence)
    ids, fact_tokens, fact_set = [], [], {id(f) for f in facts}
    for group in pieces:
        for part in group:
            if id(part) in fact_set:
                fact_tokens.append(len(ids))
            ids.extend(part)
    return {
        "context": tokenizer.decode(ids)[1:],  # every part carries a leading space
        "question": item.question,
        "target": item.answer,
        "fact_positions": gaps,
        "fact_tokens": fact_tokens,
        "context_tokens": len(ids),
        "length": length,
    }
