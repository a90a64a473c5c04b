"""Conversion both ways between our model directory and a Hugging Face folder.

Ours: ``config.json`` (our format) + ``model.safetensors`` + ``tokenizer_spec.json``.
HF: ``config.json`` (``TitansAtlasConfig``) + ``model.safetensors`` (the same tensors, named
``model.<our name>``) + ``generation_config.json`` + the tokenizer's files. Both directions
go through the libraries' own strict loaders and writers, so a folder that loads is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ...io import CheckpointError, load_model
from ...models import LanguageModel
from .config import MODEL_TYPE
from .modeling import TitansAtlasForCausalLM
from .tokenizer import from_hf_tokenizer, read_spec, to_hf_tokenizer

# the weight files an HF folder may hold that load without running code
SAFETENSORS_FILES = ("model.safetensors", "model.safetensors.index.json")


def to_hf_model(
    model: LanguageModel, tokenizer_spec: dict | None = None, model_dir: str | Path | None = None
) -> TitansAtlasForCausalLM:
    """Wrap one of our models as an HF model (weights shared). ``tokenizer_spec`` (default
    bytes; its files in ``model_dir``) is recorded in the config, and its end-of-text id
    becomes ``eos_token_id``."""
    spec = tokenizer_spec or {"kind": "bytes"}
    eos = to_hf_tokenizer(spec, model_dir).eos_token_id
    return TitansAtlasForCausalLM.from_language_model(model, tokenizer_spec=spec, eos_token_id=eos)


def export_hf(model_dir: str | Path, hf_dir: str | Path) -> Path:
    """Write the HF folder for the model directory ``model_dir`` into ``hf_dir``."""
    model_dir, hf_dir = Path(model_dir), Path(hf_dir)
    if hf_dir.resolve() == model_dir.resolve():
        raise ValueError("hf_dir must differ from model_dir (both have a config.json)")
    model = load_model(model_dir)
    spec = read_spec(model_dir, model.config.vocab_size)
    tokenizer = to_hf_tokenizer(spec, model_dir)  # first: an unbridged kind fails before work
    to_hf_model(model, spec, model_dir).save_pretrained(str(hf_dir))
    tokenizer.save_pretrained(str(hf_dir))
    return hf_dir


def import_hf(hf_dir: str | Path, model_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write our model directory for the HF folder ``hf_dir`` into ``model_dir``."""
    hf_dir, model_dir = Path(hf_dir), Path(model_dir)
    if hf_dir.resolve() == model_dir.resolve():
        raise ValueError("model_dir must differ from hf_dir (both have a config.json)")
    if not (hf_dir / "config.json").is_file():  # else transformers would look for a hub repo
        raise CheckpointError(f"{hf_dir} is not a Hugging Face folder (no config.json)")
    _check_hf_config(hf_dir / "config.json")
    if not any((hf_dir / name).is_file() for name in SAFETENSORS_FILES):
        raise CheckpointError(
            f"{hf_dir} holds no model.safetensors (pickle files such as pytorch_model.bin are "
            "never read: loading one can run code)"
        )
    try:
        hf_model = TitansAtlasForCausalLM.from_pretrained(
            str(hf_dir), dtype=dtype, use_safetensors=True
        )
    except (OSError, ValueError, RuntimeError, KeyError) as err:  # transformers' many kinds
        raise CheckpointError(f"cannot load the Hugging Face folder {hf_dir}: {err}") from err
    spec = hf_model.config.tokenizer_spec
    if not isinstance(spec, dict):
        raise CheckpointError(
            f'{hf_dir / "config.json"}: "tokenizer_spec" must be an object, got {spec!r}'
        )
    # Written beside the destination first and moved in only when complete: a failure (say,
    # an unreadable tokenizer) leaves no model directory without its tokenizer behind.
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.import-", dir=model_dir.parent))
    try:
        hf_model.model.save_pretrained(str(staging))
        try:
            from_hf_tokenizer(spec, hf_dir, staging)
        except ValueError as err:
            raise CheckpointError(f"{hf_dir}: cannot convert its tokenizer: {err}") from err
        model_dir.mkdir(exist_ok=True)
        for item in staging.iterdir():
            os.replace(item, model_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return model_dir


def _check_hf_config(path: Path) -> None:
    """A titans_atlas HF config, not our own model directory's config.json (transformers
    would fail on it with a size-mismatch report)."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        ours = isinstance(config, dict) and config.get("format") == "titans-atlas"
        hint = ": it is our model directory; --format hf converts it" if ours else ""
        raise CheckpointError(
            f"{path} is not a {MODEL_TYPE!r} Hugging Face config (model_type "
            f"{config.get('model_type') if isinstance(config, dict) else None!r}){hint}"
        )
