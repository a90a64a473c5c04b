"""The Hugging Face config: our ``ModelConfig`` inside a ``PretrainedConfig``.

``titans`` holds ``ModelConfig.to_dict()`` and is the only source of truth (a complete memory
dict saved before the memory's stability fields existed is read with the values that give the
layer it was saved from, as checkpoint format 2 is, and one saved before ``output_init``
with LeCun's last weight, 1); the standard HF
names (``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``tie_word_embeddings``) mirror it for tools that read them, and a mirror that disagrees with
it is a ValueError. ``tokenizer_spec`` records our tokenizer (``tokenizer_spec.json``) so an HF
folder converts back to a model directory with the tokenizer it was trained with.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from ...layers.memory_config import upgrade_saved_memory
from ...models import ModelConfig

MODEL_TYPE = "titans_atlas"


class TitansAtlasConfig(PretrainedConfig):
    """``TitansAtlasConfig(titans=ModelConfig(...).to_dict())`` or
    ``TitansAtlasConfig.from_model_config(config)``; with no ``titans``, ``ModelConfig()``."""

    model_type = MODEL_TYPE

    titans: dict[str, Any] | None = None
    tokenizer_spec: dict[str, Any] | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    tie_word_embeddings: bool | None = None
    use_cache: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.titans is not None and not isinstance(self.titans, dict):
            raise ValueError(f"titans must be a ModelConfig dict, got {type(self.titans).__name__}")
        titans = dict(self.titans or {})
        if isinstance(titans.get("memory"), dict):  # saved before the stability fields
            titans["memory"] = upgrade_saved_memory(titans["memory"])
        model_config = ModelConfig.from_dict(titans)
        for name, value in _mirrors(model_config).items():
            given = getattr(self, name)
            if given is not None and given != value:
                if self.titans is None:  # e.g. a config.json written by hand or another model
                    raise ValueError(
                        f"{name}={given!r} without a 'titans' entry (the ModelConfig dict "
                        f"that defines the model; ModelConfig() has {value!r}): set it in titans"
                    )
                raise ValueError(
                    f"{name}={given!r} disagrees with titans ({value!r}); set it in titans instead"
                )
            setattr(self, name, value)
        self.titans = model_config.to_dict()
        if self.tokenizer_spec is None:
            self.tokenizer_spec = {"kind": "bytes"}
        super().__post_init__(**kwargs)

    @property
    def model_config(self) -> ModelConfig:
        """A fresh ``ModelConfig`` (editing it does not change this config)."""
        return ModelConfig.from_dict(self.titans)

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs: Any) -> TitansAtlasConfig:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        return cls(titans=config.to_dict(), **kwargs)


def _mirrors(config: ModelConfig) -> dict[str, Any]:
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": config.dim,
        "num_hidden_layers": config.depth,
        "num_attention_heads": config.num_heads,
        "tie_word_embeddings": config.tie_embeddings,
    }
