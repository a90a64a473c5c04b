"""Hugging Face ``transformers`` integration (``pip install "titans-atlas[hf]"``).

Importing this module registers our models with ``AutoConfig`` / ``AutoModelForCausalLM`` /
``AutoTokenizer`` (model type ``"titans_atlas"``), so HF folders load without
``trust_remote_code``::

    import titans_atlas.integrations.hf  # registers the Auto classes
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("folder")

See docs/huggingface.md.
"""

from __future__ import annotations

try:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        PreTrainedTokenizerFast,
    )
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        'titans_atlas.integrations.hf needs transformers: pip install "titans-atlas[hf]"'
    ) from err

from .cache import RowGroup, TitansAtlasCache
from .config import MODEL_TYPE, TitansAtlasConfig
from .convert import export_hf, import_hf, to_hf_model
from .modeling import TitansAtlasForCausalLM
from .tokenizer import BRIDGES, TokenizerBridge, byte_level_tokenizer, to_hf_tokenizer

AutoConfig.register(MODEL_TYPE, TitansAtlasConfig, exist_ok=True)
AutoModelForCausalLM.register(TitansAtlasConfig, TitansAtlasForCausalLM, exist_ok=True)
# A folder's tokenizer_config.json names its class; this is the fallback when it does not.
AutoTokenizer.register(TitansAtlasConfig, tokenizer_class=PreTrainedTokenizerFast, exist_ok=True)

__all__ = [
    "BRIDGES",
    "MODEL_TYPE",
    "RowGroup",
    "TitansAtlasCache",
    "TitansAtlasConfig",
    "TitansAtlasForCausalLM",
    "TokenizerBridge",
    "byte_level_tokenizer",
    "export_hf",
    "import_hf",
    "to_hf_model",
    "to_hf_tokenizer",
]
