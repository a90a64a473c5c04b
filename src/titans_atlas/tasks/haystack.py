"""Haystack material shared by the long-context tasks: book text split into sentences, the
needle key words, and fitting a text to a token budget.

* Sentences: an untrained Punkt splitter (``nltk.PunktSentenceTokenizer()``), as BABILong's
  ``SentenceSampler`` uses; it needs no downloaded model.
* Books: every ``*.txt`` in a folder the user points to (tests and docs use the public-domain
  books in ``shared/data/gutenberg``), Project Gutenberg header and licence cut off, whitespace
  runs collapsed as RULER does with its essays.
* Words: RULER's keys, "adjective-noun" over wonderwords' lists (its ``assets``
  ``adjectivelist.txt`` x ``nounlist.txt``).
"""

from __future__ import annotations

import functools
import importlib.resources
import random
import re
from collections.abc import Callable
from pathlib import Path

from ..extras import require
from ..validation import read_text_file

_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", re.M | re.I)
_END = re.compile(
    r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)", re.M | re.I
)
_OLD_HEADER_END = re.compile(r"^\*END\*?[ *]?THE SMALL PRINT.*$", re.M | re.I)


def strip_gutenberg(text: str) -> str:
    """The body of a Project Gutenberg file: after its START (or old-style small-print END)
    marker, before its END marker; the text itself when it has no markers."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    start = _START.search(text) or _OLD_HEADER_END.search(text)
    if start:
        text = text[start.end() :]
    end = _END.search(text)
    return text[: end.start()] if end else text


def load_books(folder: str | Path) -> list[tuple[str, str]]:
    """``(file name, body)`` of every ``*.txt`` in ``folder``, sorted by name, bodies with
    whitespace runs collapsed to one space. ValueError naming the folder when there are none."""
    folder = Path(folder)
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    if not files:
        raise ValueError(
            f"no book text found: {str(folder)!r} must be a folder of *.txt files (e.g. "
            "public-domain books from Project Gutenberg; this repository's tests use "
            "../shared/data/gutenberg)"
        )
    books = []
    for path in files:
        body = strip_gutenberg(read_text_file(path, "book file"))
        books.append((path.name, re.sub(r"\s+", " ", body).strip()))
    return books


@functools.lru_cache(maxsize=1)
def _punkt():
    punkt = require("nltk.tokenize.punkt", "splitting book text into sentences")
    return punkt.PunktSentenceTokenizer()


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by an untrained Punkt splitter (BABILong's choice)."""
    return _punkt().tokenize(text)


@functools.lru_cache(maxsize=8)
def book_sentences(folder: str) -> tuple[str, ...]:
    """All sentences of the books in ``folder``, book after book (cached per folder)."""
    return tuple(s for _, body in load_books(folder) for s in split_sentences(body))


@functools.lru_cache(maxsize=1)
def word_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """wonderwords' adjective and noun lists (its ``assets``), sorted and de-duplicated."""
    require("wonderwords", "the S-NIAH key words (RULER draws them from wonderwords)")
    assets = importlib.resources.files("wonderwords") / "assets"

    def read(name: str) -> tuple[str, ...]:
        text = (assets / name).read_text(encoding="utf-8")
        return tuple(sorted({w.strip() for w in text.splitlines() if w.strip()}))

    return read("adjectivelist.txt"), read("nounlist.txt")


def needle_word(rng: random.Random) -> str:
    """A uniform draw from RULER's key words, every "adjective-noun" of wonderwords' lists
    (drawn as a pair rather than from the 6M-word product RULER builds: same distribution)."""
    adjectives, nouns = word_lists()
    return f"{rng.choice(adjectives)}-{rng.choice(nouns)}"


def largest_fitting(
    count_tokens: Callable[[int], int], budget: int, upper: int, guess: int = 0
) -> int:
    """The largest n in [0, upper] with ``count_tokens(n) <= budget`` (``count_tokens`` must
    grow with n); -1 when even n = 0 is over. Gallops from ``guess`` in steps that double,
    then bisects, so a good guess costs a few calls on prompts near the budget."""
    if count_tokens(0) > budget:
        return -1
    fits = lambda n: count_tokens(n) <= budget  # noqa: E731
    guess = min(max(guess, 0), upper)
    step = max(1, guess // 32)
    if fits(guess):
        low, high = guess, guess + step  # low fits; find a high that does not
        while high <= upper and fits(high):
            low, high, step = high, high + 2 * step, 2 * step
        high = min(high, upper + 1)
    else:
        low, high = guess - step, guess  # high does not fit; find a low that does
        while low > 0 and not fits(low):
            low, high, step = low - 2 * step, low, 2 * step
        low = max(low, 0)
    while high - low > 1:  # count(low) fits; count(high) does not, or high is past upper
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
