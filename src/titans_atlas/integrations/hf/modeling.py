"""Every registered architecture as a ``transformers`` causal LM with ``generate()``.

Axes: B batch, T tokens, V vocabulary.
``TitansAtlasForCausalLM`` wraps one of our ``LanguageModel`` s as ``self.model`` (weights
``model.<our name>``); its cache is a ``TitansAtlasCache`` holding our ``ModelState``, so
generation feeds the prompt once and then one token per step, as ``titans_atlas.generate``.
Left-padded batches stream in groups of equal length (see ``cache.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from ...io import CheckpointError
from ...models import LanguageModel, build_model
from .cache import RowGroup, TitansAtlasCache, check_continuation_mask, padding_groups
from .config import TitansAtlasConfig

# Arguments generate() or a Trainer may pass that change nothing when left at these values.
_NEUTRAL_KWARGS = {"output_attentions": (None, False), "output_hidden_states": (None, False)}


class TitansAtlasForCausalLM(PreTrainedModel, GenerationMixin):
    """``forward(input_ids [B, T], attention_mask [B, T], cache, labels) -> logits [B, T, V]``
    (logits at pad positions are zero), the updated cache and the shifted next-token loss."""

    config_class = TitansAtlasConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _is_stateful = True  # generate() refuses assisted decoding, which would rewind the stream
    _tied_weights_keys = {"model.head.weight": "model.embed.weight"}  # noqa: RUF012
    _no_split_modules = ["LanguageModel"]  # noqa: RUF012

    def __init__(self, config: TitansAtlasConfig) -> None:
        super().__init__(config)
        self.model: LanguageModel = build_model(config.model_config)
        self.post_init()

    @classmethod
    def from_language_model(cls, model: LanguageModel, **config_kwargs: Any):
        """Wrap one of our models (its weights are shared, not copied)."""
        if not isinstance(model, LanguageModel):
            raise ValueError(f"model must be a LanguageModel, got {type(model).__name__}")
        config = TitansAtlasConfig.from_model_config(model.config, **config_kwargs)
        with torch.device("meta"):  # the placeholder built here is replaced at once
            wrapper = cls(config)
        wrapper.model = model
        return wrapper

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any):
        """HF's loader, strict: a checkpoint missing or adding a weight is a CheckpointError
        (HF would otherwise initialise what is missing and only warn)."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        problems = {key: sorted(map(str, found)) for key, found in info.items() if found}
        if problems:
            where = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            raise CheckpointError(f"{where} does not match its config: {problems}")
        return (model, info) if want_info else model

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Our modules initialise themselves when built (gate biases, persistent tokens, memory
        weights); HF's generic re-initialisation would undo that."""

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # forward() makes a TitansAtlasCache; a DynamicCache cannot hold a stream

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.model.embed

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.model.head

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: TitansAtlasCache | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        _check_kwargs(kwargs)
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError("input_ids must be a [B, T] tensor of token ids")
        if cache is not None and not isinstance(cache, TitansAtlasCache):
            raise ValueError(f"cache must be a TitansAtlasCache, got {type(cache).__name__}")
        if not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"logits_to_keep must be an int >= 0, got {logits_to_keep!r}")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = TitansAtlasCache() if cache is None else cache
        logits = self._stream(input_ids, attention_mask, cache, last_only=logits_to_keep == 1)
        loss = None if labels is None else _next_token_loss(logits, labels, num_items_in_batch)
        if logits_to_keep > 1:
            logits = logits[:, -logits_to_keep:]
        cache = cache if use_cache else None
        output = CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache)
        use_dict = self.config.return_dict if return_dict is None else return_dict
        return output if use_dict else output.to_tuple()

    def _stream(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: TitansAtlasCache,
        last_only: bool,
    ) -> torch.Tensor:
        """Run every group of rows through its stream. ``cache`` is updated only once every
        group has run (a failing call leaves it as it was)."""
        batch, width = input_ids.shape
        groups, starts, trailing = _plan(input_ids, attention_mask, cache)
        out_width = 1 if last_only else width
        if len(groups) == 1 and groups[0].rows is None:  # one stream: no gather, no scatter
            logits, state = self.model(
                input_ids[:, starts[0] :], groups[0].state, last_only=last_only
            )
            groups = [RowGroup(None, state)]
            logits = F.pad(logits, (0, 0, out_width - logits.shape[1], 0))  # [B, T, V]
        else:
            logits = self.model.head.weight.new_zeros(batch, out_width, self.config.vocab_size)
            advanced = []
            for group, start in zip(groups, starts):
                piece, state = self.model(
                    input_ids[group.rows, start:], group.state, last_only=last_only
                )
                logits[group.rows, out_width - piece.shape[1] :] = piece  # right-aligned rows
                advanced.append(RowGroup(group.rows, state))
            groups = advanced
        cache.groups, cache.columns = groups, cache.columns + width
        cache.trailing_padding = cache.trailing_padding or trailing
        return logits


def _plan(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, cache: TitansAtlasCache
) -> tuple[list[RowGroup], list[int], bool]:
    """The groups of rows to run, each one's first column, and whether rows end with pads."""
    batch, width = input_ids.shape
    if not cache.is_empty:
        if cache.trailing_padding:
            raise ValueError(
                "this cache was filled from rows that end with padding: their streams hold the "
                "pad tokens and cannot be continued (pad on the left to generate)"
            )
        if cache.batch_size != batch:
            raise ValueError(f"cache holds {cache.batch_size} rows, input_ids has {batch}")
        if attention_mask is not None:
            check_continuation_mask(attention_mask, cache, width)
        return list(cache.groups), [0] * len(cache.groups), False
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if attention_mask is None or bool((attention_mask != 0).all()):
        return [RowGroup(None, None)], [0], False
    pieces, trailing = padding_groups(attention_mask)
    if len(pieces) == 1:  # every row starts at the same column: one stream, no gather
        return [RowGroup(None, None)], [pieces[0][1]], trailing
    return [RowGroup(rows, None) for rows, _ in pieces], [start for _, start in pieces], trailing


def _next_token_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
) -> torch.Tensor:
    """Cross-entropy of position t's logits against ``labels[:, t + 1]`` (-100: ignored)."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must be [B, T] = {tuple(logits.shape[:2])}, got {labels.shape}")
    predictions = logits[:, :-1].flatten(0, 1).float()  # [B * (T - 1), V]
    targets = labels[:, 1:].flatten().to(predictions.device)
    if num_items_in_batch is None:
        return F.cross_entropy(predictions, targets, ignore_index=-100)
    total = F.cross_entropy(predictions, targets, ignore_index=-100, reduction="sum")
    return total / num_items_in_batch


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unsupported = sorted(
        name
        for name, value in kwargs.items()
        if not (name in _NEUTRAL_KWARGS and value in _NEUTRAL_KWARGS[name])
    )
    if unsupported:
        raise ValueError(
            f"TitansAtlasForCausalLM does not support the argument(s) {unsupported} "
            "(positions live in the stream state; no inputs_embeds, attentions or hidden states)"
        )
