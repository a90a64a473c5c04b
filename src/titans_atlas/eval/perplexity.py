"""Perplexity and bits per byte of a text file, streamed: the file is read in blocks, the
tokens go through the model in pieces with the state carried, and only running sums are kept
(total loss, loss per position bin), so memory stays flat at any length.

Axes: T tokens of a piece, V vocabulary.
Token i is predicted from tokens < i. When the tokenizer has an end-of-text id it is put in
front as a start token and every text token is scored; otherwise the first token is not
scored and its bytes are not counted. Bits per byte = total nats / ln 2 / UTF-8 bytes scored.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from ..tokenizers import Tokenizer
from ..validation import not_text_error
from .inference import DEFAULT_PIECE, Evaluator
from .plots import curves
from .registry import EvalSettings, Scoring

BLOCK_CHARS = 1 << 16


def iter_text_blocks(path: str | Path, block_chars: int = BLOCK_CHARS) -> Iterator[str]:
    """The file's text in blocks of about ``block_chars`` characters, each cut after a line
    end that a non-space character follows (so a tokenizer sees whole words and whole runs
    of blank lines; a block is longer when a line is)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"text file {str(path)!r} does not exist or is not a file")
    pending, read = "", 0
    # strict: a replaced byte would make the bytes scored differ from the file's, and bits
    # per byte would be computed on altered data
    with open(path, encoding="utf-8", newline="") as handle:
        while chunk := _read_chunk(handle, block_chars, path, read):
            if "\0" in chunk:
                raise not_text_error(path, "text file", "a NUL byte")
            read += len(chunk)
            pending += chunk
            cut = _last_cut(pending)
            if cut > 0:
                yield pending[:cut]
                pending = pending[cut:]
    if pending:
        yield pending


def _read_chunk(handle, size: int, path: Path, read: int) -> str:
    try:
        return handle.read(size)
    except UnicodeDecodeError as err:
        raise not_text_error(path, "text file", f"an invalid byte after character {read}") from err


def _last_cut(text: str) -> int:
    """Index just after the last "\\n" that a non-space character follows; 0 if none."""
    index = len(text) - 1
    while (index := text.rfind("\n", 0, index)) >= 0:
        if not text[index + 1].isspace():
            return index + 1
    return 0


class _Accumulator:
    """Running sums of a stream's token losses: total and per position bin."""

    def __init__(self, bin_size: int) -> None:
        self.bin_size, self.nats, self.tokens = bin_size, 0.0, 0
        self.bin_sums: dict[int, float] = {}
        self.bin_counts: dict[int, int] = {}

    def add(self, positions: torch.Tensor, losses: torch.Tensor) -> None:
        self.nats += float(losses.double().sum())
        self.tokens += losses.numel()
        bins = positions // self.bin_size
        for b in bins.unique().tolist():
            chosen = losses[bins == b]
            self.bin_sums[b] = self.bin_sums.get(b, 0.0) + float(chosen.double().sum())
            self.bin_counts[b] = self.bin_counts.get(b, 0) + chosen.numel()

    def curve(self) -> list[dict]:
        return [
            {
                "start": b * self.bin_size,
                "end": (b + 1) * self.bin_size,
                "tokens": self.bin_counts[b],
                "loss": self.bin_sums[b] / self.bin_counts[b],
            }
            for b in sorted(self.bin_sums)
        ]


@torch.no_grad()
def stream_perplexity(
    model,
    tokenizer: Tokenizer,
    path: str | Path,
    *,
    max_tokens: int | None = None,
    piece_size: int = DEFAULT_PIECE,
    bin_size: int = 1024,
) -> dict:
    """Stream the text file ``path`` through ``model``: loss (nats/token), perplexity, bits
    per byte, the loss-by-position curve (bins of ``bin_size`` tokens), seconds, and the
    process's resident memory every few pieces (``memory_trace``: it stays flat)."""
    if max_tokens is not None and max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2 or None, got {max_tokens}")
    if piece_size < 1 or bin_size < 1:
        raise ValueError(f"piece_size and bin_size must be >= 1, got {piece_size}, {bin_size}")
    evaluator = Evaluator(model, piece_size=piece_size, check_budget=False)
    sums, trace = _Accumulator(bin_size), []
    start = time.perf_counter()
    state, previous, position, pieces = None, None, 0, 0
    total_bytes, unscored_bytes = 0, 0
    for piece, piece_bytes in _token_pieces(tokenizer, path, piece_size, max_tokens):
        total_bytes += piece_bytes
        logits, state = model(evaluator.as_tensor(piece), state=state)
        logits = logits[0].float()  # [T, V]
        targets = torch.as_tensor(piece, device=logits.device)
        predictions = logits[:-1] if previous is None else torch.cat([previous, logits[:-1]])
        scored = targets[1:] if previous is None else targets
        if previous is None and tokenizer.eos_id is None:  # the first text token: unscored
            unscored_bytes = len(tokenizer.decode(piece[:1]).encode("utf-8"))
        first = position + (1 if previous is None else 0)
        losses = F.cross_entropy(predictions, scored, reduction="none")
        sums.add(
            torch.arange(first, first + losses.numel(), device=losses.device).cpu(), losses.cpu()
        )
        previous, position, pieces = logits[-1:], position + len(piece), pieces + 1
        if pieces % 8 == 1:
            trace.append({"position": position, "rss_mib": round(_rss_bytes() / 2**20, 1)})
    if sums.tokens == 0:
        raise ValueError(f"{path} holds too little text to score (need 2 tokens or more)")
    scored_bytes = total_bytes - unscored_bytes
    loss = sums.nats / sums.tokens
    return {
        "tokens": sums.tokens,
        "bytes": scored_bytes,
        "nats": sums.nats,
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "bits_per_byte": sums.nats / math.log(2) / max(1, scored_bytes),
        "bin_size": bin_size,
        "curve": sums.curve(),
        "memory_trace": trace,
        "seconds": round(time.perf_counter() - start, 3),
    }


def _token_pieces(
    tokenizer: Tokenizer, path: str | Path, piece_size: int, max_tokens: int | None
) -> Iterator[tuple[list[int], int]]:
    """Pieces of ``piece_size`` token ids (a start token first when the tokenizer has one)
    with the UTF-8 bytes of text their tokens add."""
    buffer = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    budget = None if max_tokens is None else max_tokens - len(buffer)
    buffer_bytes = 0
    for block in iter_text_blocks(path):
        ids = tokenizer.encode(block)
        if budget is not None and len(ids) >= budget:
            ids = ids[:budget]
            block = tokenizer.decode(ids)
        buffer.extend(ids)
        buffer_bytes += len(block.encode("utf-8"))
        if budget is not None:
            budget -= len(ids)
        while len(buffer) >= piece_size:  # the bytes travel with the first piece of a block
            yield buffer[:piece_size], buffer_bytes
            buffer, buffer_bytes = buffer[piece_size:], 0
        if budget == 0:
            break
    if buffer:
        yield buffer, buffer_bytes


def _rss_bytes() -> int:
    """Resident memory of this process now (Linux /proc; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


# --- task ------------------------------------------------------------------------------------


def _samples(settings: EvalSettings, tokenizer: Tokenizer):
    if settings.text is None:
        raise ValueError("the perplexity task needs a text file: --text FILE")
    path = Path(settings.text)
    if not path.is_file():
        raise ValueError(f"text file {settings.text!r} does not exist or is not a file")
    max_tokens = max(settings.lengths) if settings.lengths else None
    # a token holds at least one byte for byte-level and BPE tokenizers: the file size bounds
    # the tokens, and so the memory estimate
    bound = path.stat().st_size + 1
    yield {
        "path": str(path),
        "max_tokens": max_tokens,
        "num_tokens": min(bound, max_tokens or bound),
    }


def _score(evaluator: Evaluator, tokenizer: Tokenizer, sample: dict, settings: EvalSettings):
    stats = stream_perplexity(
        evaluator.model,
        tokenizer,
        sample["path"],
        max_tokens=sample["max_tokens"],
        piece_size=evaluator.piece_size,
        bin_size=settings.bin_size,
    )
    window = getattr(evaluator.model.config, "window", None)
    return {**{k: v for k, v in sample.items()}, **stats, "window": window, "score": stats["loss"]}


def _summarize(outcomes: list[dict], settings: EvalSettings) -> dict:
    keys = ("tokens", "bytes", "loss", "perplexity", "bits_per_byte", "seconds")
    return {k: outcomes[0][k] for k in keys}


def _plot(result: dict, path: Path) -> None:
    outcome = result["samples"][0]
    points = outcome["curve"]
    xs = [(p["start"] + p["end"]) / 2 for p in points]
    window = outcome.get("window")
    curves(
        {"loss": (xs, [p["loss"] for p in points])},
        path,
        title=(
            f"{result['label']}: {Path(outcome['path']).name}, "
            f"{outcome['bits_per_byte']:.3f} bits/byte over {outcome['tokens']} tokens"
        ),
        xlabel=f"position (tokens; bins of {outcome['bin_size']})",
        ylabel="loss (nats/token)",
        vlines=[(window, "window")] if window else (),
    )


Scoring(_score, _summarize, _plot).register(
    name="perplexity",
    label="Perplexity / bits per byte (streamed)",
    description="loss, perplexity and bits per byte of a text file, with loss by position",
    samples=_samples,
)
