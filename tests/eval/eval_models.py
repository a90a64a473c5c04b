"""Hand-built models for the evaluation tests. Honest about what they show: they are not
trained; they implement, by hand, a reader limited to a sliding window of ``window`` tokens
(the streaming state is the last ``window`` ids, like an SWA KV cache). A model that can copy
what it sees solves the tasks within its window; the same model cannot beyond it -- which
shows the tasks need memory of what left the window, that the scorers reward a correct
answer and nothing else, and that the harness hands the model only what it streamed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from titans_atlas.tokenizers import ByteTokenizer

CONFIDENT = 10.0  # the logit of the copied token; all others are 0


@dataclass
class TinyConfig:
    vocab_size: int
    window: int
    name: str = "hand-built"
    dim: int = 8
    num_heads: int = 1


@dataclass
class WindowState:
    tokens: list[list[int]]  # per sample, the last `window` ids seen
    position: int

    def nbytes(self) -> int:
        return 8 * sum(len(row) for row in self.tokens)


class _WindowModel(nn.Module):
    def __init__(self, vocab_size: int, window: int) -> None:
        super().__init__()
        self.config = TinyConfig(vocab_size, window)
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the model a device

    def forward(self, input_ids, state=None, last_only: bool = False):
        batch = input_ids.tolist()
        seen_rows = [[] for _ in batch] if state is None else [list(r) for r in state.tokens]
        outputs = []
        for tokens, seen in zip(batch, seen_rows):
            rows = []
            for index, token in enumerate(tokens):
                seen[:] = [*seen, token][-self.config.window :]
                if not last_only or index == len(tokens) - 1:
                    rows.append(self.predict(seen))
            outputs.append(torch.stack(rows))
        logits = torch.stack(outputs)  # [B, T, V] ([B, 1, V] with last_only)
        position = (0 if state is None else state.position) + input_ids.shape[1]
        return logits, WindowState(seen_rows, position)

    def one_hot(self, token: int | None) -> torch.Tensor:
        logits = torch.zeros(self.config.vocab_size)
        if token is not None:
            logits[token] = CONFIDENT
        return logits


class InductionCopyModel(_WindowModel):
    """An induction head over a sliding window: at the current token, find its most recent
    earlier occurrence among the visible tokens and predict the token that followed it."""

    def predict(self, visible: list[int]) -> torch.Tensor:
        current = visible[-1]
        for j in range(len(visible) - 2, -1, -1):
            if visible[j] == current:
                return self.one_hot(visible[j + 1])
        return self.one_hot(None)


class NeedleReaderModel(_WindowModel):
    """Reads its window as text; when RULER's question for a key and the needle for that key
    are both visible, it continues the answer " {value}." token by token. Predicts only the
    next token after the visible text (enough for greedy decoding)."""

    QUESTION = re.compile(
        r"What is the special magic (\w+) for (\S+) mentioned in the provided text\? "
        r"The special magic \1 for \2 mentioned in the provided text is(.*)$",
        re.S,
    )

    def __init__(self, window: int, tokenizer=None) -> None:
        self.tokenizer = tokenizer or ByteTokenizer()
        super().__init__(self.tokenizer.vocab_size, window)

    def predict(self, visible: list[int]) -> torch.Tensor:
        text = self.tokenizer.decode(visible)
        question = self.QUESTION.search(text)
        if question is None:
            return self.one_hot(None)
        kind, key, produced = question.groups()
        needle = re.search(
            rf"One of the special magic {kind}s for {re.escape(key)} is: (\S+)\.", text
        )
        if needle is None:
            return self.one_hot(None)
        answer = f" {needle.group(1)}."
        if not answer.startswith(produced) or answer == produced:
            return self.one_hot(None)
        return self.one_hot(self.tokenizer.encode(answer[len(produced) :])[0])


class EosByteTokenizer(ByteTokenizer):
    """Bytes plus an end-of-text id 256 (exercises the start-token path)."""

    name = "bytes+eos"
    vocab_size = 257
    eos_id = 256
