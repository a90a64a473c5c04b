"""The streaming state as a ``transformers`` cache, and exact left padding.

Axes: B batch, T tokens (columns of the padded batch), V vocabulary.

A Titans/ATLAS stream has one position for the whole batch (``ModelState.position``): rotary
angles, the memory's chunk grid, MAC segments and KV-cache positions all count from the
stream start. A left-padded row starts later than the others, so no single stream can hold it
-- and pad tokens cannot be made identity steps (they would still enter the short convolutions,
the momentum and the chunk grid). The exact strategy here: rows with the same number of real
tokens form a *group* that streams as one batch from its first real token; each group keeps
its own ``ModelState``. A batch without padding is one group, so HF generation then costs
exactly what ``titans_atlas.generate`` costs: one forward of the prompt, then one of one token
per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from ...models import ModelState


@dataclass
class RowGroup:
    """Rows of the batch that stream together: ``rows`` ``[G]`` (None: every row, in order)."""

    rows: torch.Tensor | None
    state: ModelState


class TitansAtlasCache(Cache):
    """HF's cache object for Titans/ATLAS models: one ``ModelState`` per group of rows.

    ``generate`` updates this object in place (HF's convention for caches); the ``ModelState``
    objects inside are replaced at each step, never mutated. ``columns`` counts the padded
    input columns consumed so far (what HF's ``get_seq_length`` means).
    """

    def __init__(self, groups: list[RowGroup] | None = None, columns: int = 0) -> None:
        super().__init__(layers=[])
        self.groups: list[RowGroup] = list(groups or [])
        self.columns = columns
        self.trailing_padding = False  # rows ended with pads: the streams cannot be continued

    @classmethod
    def from_state(cls, state: ModelState) -> TitansAtlasCache:
        """Continue one of our streams (every row at ``state.position``) under HF."""
        if not isinstance(state, ModelState):
            raise ValueError(f"state must be a ModelState, got {type(state).__name__}")
        return cls([RowGroup(None, state)], columns=state.position)

    @property
    def state(self) -> ModelState:
        """The ``ModelState`` of an unpadded batch (ValueError when rows stream in groups)."""
        if len(self.groups) != 1 or self.groups[0].rows is not None:
            raise ValueError(
                f"this cache streams {len(self.groups)} groups of rows (a left-padded batch); "
                "read cache.groups instead"
            )
        return self.groups[0].state

    @property
    def is_empty(self) -> bool:
        return not self.groups

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.columns

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # the memory has no maximum length

    @property
    def batch_size(self) -> int:
        return sum(_group_size(group) for group in self.groups) if self.groups else -1

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    @property
    def is_linear(self) -> list[bool]:
        # [False]: generate may slice inputs by get_seq_length when a cache is passed in
        return [False]

    def reset(self) -> None:
        self.groups, self.columns, self.trailing_padding = [], 0, False

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError(_NO_ROW_EDITS.format(what="beam search"))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError(_NO_ROW_EDITS.format(what="cropping (assisted decoding)"))

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError(_NO_ROW_EDITS.format(what="expanding a filled cache"))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError(_NO_ROW_EDITS.format(what="selecting rows of a filled cache"))


_NO_ROW_EDITS = (
    "{what} is not supported by Titans/ATLAS models: a memory stream cannot be rewound or "
    "reordered in place (use greedy or sampling with num_beams=1)"
)


def _group_size(group: RowGroup) -> int:
    return group.state.batch_size if group.rows is None else int(group.rows.numel())


def padding_groups(attention_mask: torch.Tensor) -> tuple[list[tuple[torch.Tensor, int]], bool]:
    """Split a padded batch into groups of rows whose real tokens start at the same column.

    ``attention_mask`` ``[B, T]`` (1 real, 0 pad): each row zeros, ones, then zeros. Returns
    ``(rows [G], first_column)`` per group, earliest first, and whether any row ends with
    padding. Trailing pads come after every real token, so causality keeps the real tokens'
    logits exact, but the stream then holds them: such a cache cannot be continued.
    ValueError for padding between real tokens or a row without any.
    """
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be [B, T], got shape {tuple(attention_mask.shape)}")
    real = attention_mask != 0
    if bool((~real.any(dim=1)).any()):
        raise ValueError("attention_mask has a row without any real token")
    columns = torch.arange(real.shape[1], device=real.device)
    first = torch.where(real, columns, real.shape[1]).amin(dim=1)  # [B]
    last = torch.where(real, columns, -1).amax(dim=1)  # [B]
    span = (columns >= first[:, None]) & (columns <= last[:, None])  # [B, T]
    if not torch.equal(real, span):
        raise ValueError(
            "attention_mask has padding between real tokens; Titans/ATLAS models stream every "
            "token they are given, so pad only before (padding_side='left') or after a row"
        )
    starts = torch.unique(first).tolist()  # ascending: the longest rows first
    groups = [(torch.nonzero(first == start).flatten(), start) for start in starts]
    return groups, bool((last < real.shape[1] - 1).any())


def check_continuation_mask(
    attention_mask: torch.Tensor, cache: TitansAtlasCache, new_tokens: int
) -> None:
    """A call on a filled cache: the mask ``[B, columns + new]`` must hold the cache's padding
    and ones for the new tokens (padding is only possible before the first real token)."""
    expected = (cache.batch_size, cache.columns + new_tokens)
    if tuple(attention_mask.shape) != expected:
        raise ValueError(
            f"attention_mask must be {list(expected)} (the cache holds {cache.columns} columns, "
            f"plus {new_tokens} new), got shape {tuple(attention_mask.shape)}"
        )
    if not bool((attention_mask[:, -new_tokens:] != 0).all()):
        raise ValueError("attention_mask: padding is only supported before a row's first token")
    real = (attention_mask != 0).sum(dim=1)  # [B]
    for group in cache.groups:
        counted = real if group.rows is None else real[group.rows]
        if not bool((counted == group.state.position + new_tokens).all()):
            raise ValueError("attention_mask does not match the padding the cache was filled with")
