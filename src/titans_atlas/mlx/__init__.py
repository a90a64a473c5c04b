"""The MLX backend of titans-atlas: the same models, loading the same checkpoints, on Apple
silicon (and on Linux CPUs with ``mlx[cpu]``). Install with ``pip install titans-atlas[mlx]``.

    import titans_atlas.mlx as tam
    model = tam.load_model("ckpt")                 # a directory saved by either side
    out = tam.generate(model, [[1, 2, 3]], 32, temperature=0.8, top_p=0.9, seed=0)
    ppl = tam.perplexity(model, ids, piece_tokens=512)

Mirrors the torch package file for file: ``ops/`` (memory engine), ``layers/``, ``models/``,
``generate.py``, ``checkpoint.py``; configs are the torch side's ``ModelConfig``.
"""

from .generate import Sampler, SamplingConfig, decode_one_token, generate, prefill
from .models import LanguageModel, ModelState, create_model, list_models
from .models.pretrained import load_model, save_model
from .ops import GatedMLPMemory, LinearMemory, MemoryState, MLPMemory, memory_scan
from .perplexity import perplexity, token_log_likelihoods

__all__ = [
    "GatedMLPMemory",
    "LanguageModel",
    "LinearMemory",
    "MLPMemory",
    "MemoryState",
    "ModelState",
    "Sampler",
    "SamplingConfig",
    "create_model",
    "decode_one_token",
    "generate",
    "list_models",
    "load_model",
    "memory_scan",
    "perplexity",
    "prefill",
    "save_model",
    "token_log_likelihoods",
]
