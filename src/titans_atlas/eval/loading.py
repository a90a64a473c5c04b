"""What ``titans eval --checkpoint DIR`` loads: the model, its tokenizer, and the weights'
hash that every result records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..extras import require
from ..io import WEIGHTS_FILE, load_model
from ..io.training import resolve_model_dir as resolve_trained
from ..models.backbone import LanguageModel
from ..tokenizers import Tokenizer, load_model_tokenizer


@dataclass
class LoadedCheckpoint:
    model: LanguageModel
    tokenizer: Tokenizer
    model_dir: Path
    sha256: str  # of model.safetensors: which weights a result belongs to


def resolve_model_dir(path: str | Path) -> Path:
    """The model directory (config.json + model.safetensors) that ``path`` names: a model
    directory, a training checkpoint, or a run directory (its latest checkpoint)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"checkpoint {str(path)!r} is not a directory")
    return resolve_trained(path)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", backend: str = "torch"
) -> LoadedCheckpoint:
    """Model, tokenizer (``tokenizer_spec.json`` beside the weights; absent means bytes for a
    256-id model, an error otherwise) and
    the sha256 of the weights. The tokenizer's ids must fit the model's vocabulary.
    ``backend="mlx"``: the model runs in MLX behind the torch API (``mlx/torch_bridge.py``)."""
    model_dir = resolve_model_dir(path)
    if backend == "mlx":
        if str(device) != "cpu":
            raise ValueError(f"--backend mlx picks its own device; got --device {device}")
        require("mlx.core", "--backend mlx", extra="mlx")
        from ..mlx.torch_bridge import load_for_torch

        model = load_for_torch(model_dir)
    elif backend == "torch":
        model = load_model(model_dir, device=device).eval()
    else:
        raise ValueError(f"backend must be 'torch' or 'mlx', got {backend!r}")
    tokenizer = load_model_tokenizer(model_dir, model.config.vocab_size)
    return LoadedCheckpoint(model, tokenizer, model_dir, file_sha256(model_dir / WEIGHTS_FILE))
