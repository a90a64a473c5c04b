"""``titans prepare``: tokenise text once into memory-mapped shards.

Layout of a shard folder::

    OUT/meta.json               format, version, dtype, tokenizer spec, shard list
    OUT/tokenizer_spec.json     the tokenizer (hf tokenizers also write tokenizer.json)
    OUT/shard_00000.bin         raw token ids, uint16 (vocabulary <= 65536) or uint32
    OUT/shard_00000.bounds.npy  int64 [D + 1]: document d is tokens[bounds[d]:bounds[d+1]]

A document never straddles two shards; a shard closes once it holds ``shard_tokens``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..tokenizer import Tokenizer
from .config import DataConfig
from .data import SHARD_FORMAT, SHARD_META, SHARD_VERSION, hf_documents, iter_texts, token_dtype


def prepare(
    sources: Iterable[str],
    out_dir: str | Path,
    tokenizer: Tokenizer,
    *,
    text_field: str = "text",
    shard_tokens: int = 1 << 28,
    hf_split: str = "train",
) -> dict:
    """Tokenise every document of ``sources`` (text files, folders, globs, JSONL, ``hf:NAME``)
    into shards under ``out_dir``; returns the metadata written to ``meta.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / SHARD_META).exists():
        raise ValueError(f"{out} already holds shards; choose an empty folder")
    dtype = token_dtype(tokenizer.vocab_size)
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    shards, buffer, bounds = [], [], [0]
    for source in sources:
        config = DataConfig(source=source, text_field=text_field, hf_split=hf_split)
        texts = hf_documents(config) if source.startswith("hf:") else iter_texts(config)
        for text in texts:
            ids = tokenizer.encode(text) + eos
            if not ids:
                continue
            buffer.append(np.asarray(ids, dtype=dtype))
            bounds.append(bounds[-1] + len(ids))
            if bounds[-1] >= shard_tokens:
                shards.append(_write_shard(out, len(shards), buffer, bounds))
                buffer, bounds = [], [0]
    if len(bounds) > 1:
        shards.append(_write_shard(out, len(shards), buffer, bounds))
    if not shards:
        raise ValueError("the sources hold no text")
    tokenizer.save(out)
    meta = {
        "format": SHARD_FORMAT,
        "version": SHARD_VERSION,
        "dtype": dtype.name,
        "tokenizer": tokenizer.name,
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "shards": shards,
    }
    tmp = out / f".{SHARD_META}.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out / SHARD_META)  # the folder counts as shards only once complete
    return meta


def _write_shard(out: Path, index: int, arrays: list[np.ndarray], bounds: list[int]) -> dict:
    name = f"shard_{index:05d}"
    np.concatenate(arrays).tofile(out / f"{name}.bin")
    np.save(out / f"{name}.bounds.npy", np.asarray(bounds, dtype=np.int64), allow_pickle=False)
    return {
        "file": f"{name}.bin",
        "bounds": f"{name}.bounds.npy",
        "num_tokens": bounds[-1],
        "num_docs": len(bounds) - 1,
    }
