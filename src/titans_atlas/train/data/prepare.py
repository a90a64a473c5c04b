"""``titans prepare``: tokenise text once into memory-mapped shards.

Layout of a shard folder::

    OUT/meta.json               format, version, dtype, tokenizer spec, shard list
    OUT/tokenizer_spec.json     the tokenizer (hf tokenizers also write tokenizer.json)
    OUT/shard_00000.bin         raw token ids, uint16 (vocabulary <= 65536) or uint32
    OUT/shard_00000.bounds.npy  int64 [D + 1]: document d is tokens[bounds[d]:bounds[d+1]]

A document never straddles two shards; a shard closes once it holds ``shard_tokens``.
``meta.json`` is written last (atomically), and a prepare that fails removes what it wrote,
so a folder without ``meta.json`` is never a set of shards (training refuses one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ...tokenizers import HF_FILE, SPEC_FILE, Tokenizer
from ...validation import check_int, check_writable_dir
from ..config import DataConfig
from .corpus import (
    SHARD_FORMAT,
    SHARD_META,
    SHARD_VERSION,
    hf_documents,
    is_glob,
    iter_texts,
    shard_files,
    token_dtype,
)

TOKENIZER_FILES = (SPEC_FILE, HF_FILE)  # what Tokenizer.save may write (gpt2: the spec only)


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
    check_int("shard_tokens", shard_tokens, 1)
    sources, out = list(sources), Path(out_dir)
    for source in sources:  # named as the argument it is, not as a run's data.source
        if not (source.startswith("hf:") or is_glob(source) or Path(source).exists()):
            raise ValueError(
                f"source {source!r} does not exist (titans prepare reads text or JSONL files, "
                "folders, globs or hf:NAME)"
            )
    check_writable_dir("--out", out)
    if (out / SHARD_META).exists():
        raise ValueError(f"{out} already holds shards; choose an empty folder")
    if shard_files(out):
        raise ValueError(
            f"{out} holds shard files without {SHARD_META} (an interrupted titans prepare): "
            "delete them or choose an empty folder"
        )
    created, written = not out.exists(), []
    try:
        return _prepare(sources, out, tokenizer, text_field, shard_tokens, hf_split, written)
    except BaseException:  # a failed prepare leaves nothing a training could read
        for path in written:
            path.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _prepare(
    sources: Iterable[str], out: Path, tokenizer: Tokenizer, text_field: str,
    shard_tokens: int, hf_split: str, written: list[Path],
) -> dict:  # fmt: skip
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
                shards.append(_write_shard(out, len(shards), buffer, bounds, written))
                buffer, bounds = [], [0]
    if len(bounds) > 1:
        shards.append(_write_shard(out, len(shards), buffer, bounds, written))
    if not shards:
        raise ValueError(f"the sources {list(sources)} hold no text")
    written += [out / name for name in TOKENIZER_FILES]
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
    written.append(tmp)
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out / SHARD_META)  # the folder counts as shards only once complete
    return meta


def _write_shard(
    out: Path, index: int, arrays: list[np.ndarray], bounds: list[int], written: list[Path]
) -> dict:
    name = f"shard_{index:05d}"
    out.mkdir(parents=True, exist_ok=True)
    written += [out / f"{name}.bin", out / f"{name}.bounds.npy"]
    np.concatenate(arrays).tofile(out / f"{name}.bin")
    np.save(out / f"{name}.bounds.npy", np.asarray(bounds, dtype=np.int64), allow_pickle=False)
    return {
        "file": f"{name}.bin",
        "bounds": f"{name}.bounds.npy",
        "num_tokens": bounds[-1],
        "num_docs": len(bounds) - 1,
    }
