"""Token sources: text files, folders or globs, JSONL, shards written by ``titans prepare``,
Hugging Face ``datasets``, the texts shipped with the package -- all read into a ``Corpus`` of
documents over 1-D token arrays (memory-mapped for shards).

Axes: N tokens. A document is one file, one JSONL line or one dataset record; when the
tokenizer has an end-of-text id it closes every document.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...tokenizers import SPEC_FILE, Tokenizer, load_tokenizer, say_network
from ...validation import not_text_error, read_text_file
from ..config import DataConfig

TEXTS = Path(__file__).resolve().parents[2] / "texts"  # package data: public-domain plays
SHARD_META = "meta.json"
SHARD_FORMAT, SHARD_VERSION = "titans-atlas-shards", 1


@dataclass
class Corpus:
    """Documents over token arrays: ``parts[i] = (tokens [N_i], bounds [D_i + 1])`` where
    document j of part i is ``tokens[bounds[j]:bounds[j+1]]``."""

    parts: list[tuple[np.ndarray, np.ndarray]]

    @property
    def num_tokens(self) -> int:
        return sum(len(tokens) for tokens, _ in self.parts)

    def split(self, fraction: float) -> tuple[Corpus, Corpus]:
        """(first 1 - fraction, last fraction) of the tokens, cut at one global position."""
        cut = self.num_tokens - round(self.num_tokens * fraction)
        head, tail, seen = [], [], 0
        for tokens, bounds in self.parts:
            local = min(max(cut - seen, 0), len(tokens))
            if local > 0:
                head.append((tokens[:local], _clip(bounds, 0, local)))
            if local < len(tokens):
                tail.append((tokens[local:], _clip(bounds, local, len(tokens)) - local))
            seen += len(tokens)
        return Corpus(head), Corpus(tail)


def _clip(bounds: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Document bounds inside [lo, hi], with lo and hi themselves as the outer bounds."""
    inner = bounds[(bounds > lo) & (bounds < hi)]
    return np.concatenate([[lo], inner, [hi]]).astype(np.int64)


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def tokenize_documents(
    texts: Iterable[str], tokenizer: Tokenizer, source: str = "the data source"
) -> Corpus:
    """Encode documents into one in-memory part (end-of-text after each, when defined)."""
    arrays, bounds = [], [0]
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    for text in texts:
        ids = tokenizer.encode(text) + eos
        if ids:
            arrays.append(np.asarray(ids, dtype=token_dtype(tokenizer.vocab_size)))
            bounds.append(bounds[-1] + len(ids))
    if not arrays:
        raise ValueError(f"{source} holds no text (data.source: a file, folder or glob of text)")
    return Corpus([(np.concatenate(arrays), np.asarray(bounds, dtype=np.int64))])


def _read_text(path: Path) -> str:
    return read_text_file(path, "data file")


def is_glob(source: str) -> bool:
    """Whether a source is a glob pattern (``books/*.txt``) rather than one path."""
    return any(ch in source for ch in "*?[")


def text_files(source: str) -> list[Path]:
    """The files a text source names: one file, every file under a folder, or a glob."""
    if is_glob(source):
        files = [Path(p) for p in sorted(glob.glob(source, recursive=True))]
    elif Path(source).is_dir():  # hidden files and folders (.git/, .DS_Store) are not data
        root = Path(source)
        if shard_files(root):  # not text: token ids
            if (root / SHARD_META).is_file():  # a finished prepare, read where text is wanted
                raise ValueError(
                    f"{source!r} is a shard folder (token ids from titans prepare), not text: "
                    "train on it directly (--data), or prepare the text it came from"
                )
            raise ValueError(
                f"data.source {source!r} holds shard files ({shard_files(root)[0].name}) but "
                f"no {SHARD_META}: an interrupted titans prepare; prepare it again into an "
                "empty folder"
            )
        found = ((p, p.relative_to(root).parts) for p in root.rglob("*"))
        files = sorted(p for p, parts in found if not any(n.startswith(".") for n in parts))
    else:
        files = [Path(source)]
    files = [p for p in files if p.is_file()]
    if not files:
        raise ValueError(f"data.source {source!r} names no readable file")
    return files


def iter_texts(config: DataConfig, source: str | None = None) -> Iterator[str]:
    """The documents of a text-like source as strings (not shards, tasks or datasets)."""
    source = config.source if source is None else source
    if source == "builtin:shakespeare":
        source = str(TEXTS / "*.txt")
    for path in text_files(source):
        if path.suffix == ".jsonl":
            yield from _jsonl_texts(path, config.text_field)
        else:
            yield _read_text(path)


def _jsonl_texts(path: Path, field: str) -> Iterator[str]:
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                where = f"line {number}, byte {err.start}"
                raise not_text_error(path, "JSONL file", where) from err
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number} is not valid JSON: {err}") from err
            if not isinstance(record, dict) or field not in record:
                raise ValueError(f"{path}:{number} has no text field {field!r} (data.text_field)")
            if not isinstance(record[field], str):
                kind = type(record[field]).__name__
                raise ValueError(f"{path}:{number}: field {field!r} must be a string, got {kind}")
            yield record[field]


def is_shard_dir(source: str) -> bool:
    return (Path(source) / SHARD_META).is_file()


def shard_files(directory: Path) -> list[Path]:
    """The shard files ``titans prepare`` writes, found directly in ``directory``."""
    if not directory.is_dir():
        return []
    return sorted([*directory.glob("shard_*.bin"), *directory.glob("shard_*.bounds.npy")])


def read_shards(directory: str | Path) -> tuple[Corpus, Tokenizer]:
    """Memory-map the shards ``titans prepare`` wrote, with the tokenizer they were made with.
    ``meta.json`` and every bounds file are checked first (ValueError naming the file)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / SHARD_META).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{directory / SHARD_META} is unreadable: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != SHARD_FORMAT:
        raise ValueError(f"{directory} is not a {SHARD_FORMAT} v{SHARD_VERSION} folder")
    if meta.get("version") != SHARD_VERSION or meta.get("dtype") not in ("uint16", "uint32"):
        raise ValueError(f"{directory} is not a {SHARD_FORMAT} v{SHARD_VERSION} folder")
    if not isinstance(meta.get("shards"), list) or not meta["shards"]:
        raise ValueError(f"{directory / SHARD_META} lists no shards")
    parts = [_read_shard(directory, shard, np.dtype(meta["dtype"])) for shard in meta["shards"]]
    if not (directory / SPEC_FILE).is_file():
        raise ValueError(f"{directory} has no {SPEC_FILE}: shards carry the tokenizer they hold")
    tokenizer = load_tokenizer(directory)
    # every id must be one the tokenizer (and so the model's embedding) has: one read of the
    # mapped shards now, instead of an IndexError (a device assert on a GPU) mid-run
    for (tokens, _), shard in zip(parts, meta["shards"], strict=True):
        largest = int(tokens.max())
        if largest >= tokenizer.vocab_size:
            raise ValueError(
                f"shard {directory / shard['file']} holds id {largest}, outside its tokenizer's "
                f"{tokenizer.vocab_size} ids ({directory / SPEC_FILE})"
            )
    return Corpus(parts), tokenizer


def _read_shard(directory: Path, shard: object, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    where = directory / SHARD_META
    names = [shard.get(k) for k in ("file", "bounds")] if isinstance(shard, dict) else [None]
    count = shard.get("num_tokens") if isinstance(shard, dict) else None
    if not all(isinstance(n, str) and len(Path(n).parts) == 1 and n != ".." for n in names):
        raise ValueError(f"{where}: a shard entry must name two files in {directory}: {shard}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{where}: shard {names[0]} has num_tokens {count!r}; want an int >= 1")
    path = directory / names[0]
    if not path.is_file() or path.stat().st_size != count * dtype.itemsize:
        raise ValueError(
            f"shard {path} is missing or truncated (want {count * dtype.itemsize} bytes)"
        )
    try:
        bounds = np.load(directory / names[1], allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"shard bounds {directory / names[1]} are unreadable: {err}") from err
    ok = bounds.ndim == 1 and bounds.dtype == np.int64 and len(bounds) >= 2
    if not (ok and bounds[0] == 0 and bounds[-1] == count and np.all(np.diff(bounds) > 0)):
        raise ValueError(
            f"shard bounds {directory / names[1]} must be int64 document offsets rising "
            f"strictly from 0 to the shard's {count} tokens"
        )
    return np.memmap(path, dtype=dtype, mode="r"), bounds


def hf_documents(config: DataConfig, source: str | None = None) -> Iterator[str]:
    """Texts of a Hugging Face dataset (``hf:NAME``: a hub name, a local data folder, or a
    folder written by ``Dataset.save_to_disk``); streamed when ``data.hf_streaming``."""
    name = (config.source if source is None else source).removeprefix("hf:")
    try:
        import datasets
    except ImportError as err:
        raise ValueError(
            "hf: sources need the datasets package: pip install 'titans-atlas[hf]'"
        ) from err
    if (Path(name) / "state.json").is_file() or (Path(name) / "dataset_dict.json").is_file():
        data = datasets.load_from_disk(name)
        if isinstance(data, datasets.DatasetDict):
            data = data[config.hf_split]
        if config.hf_streaming:
            data = data.to_iterable_dataset()
    else:
        if not Path(name).exists():
            say_network(f"dataset {name!r}")
        data = datasets.load_dataset(
            name, config.hf_config, split=config.hf_split, streaming=config.hf_streaming
        )
    for record in data:
        if not isinstance(record.get(config.text_field), str):
            raise ValueError(f"dataset {name!r} records have no text field {config.text_field!r}")
        yield record[config.text_field]


def resolve_tokenizer(config: DataConfig) -> Tokenizer:
    """``data.tokenizer``; ``"auto"`` means the shards' own tokenizer, else bytes."""
    if config.tokenizer == "auto":
        return read_shards(config.source)[1] if is_shard_dir(config.source) else load_tokenizer()
    return load_tokenizer(config.tokenizer)


def load_corpus(config: DataConfig, tokenizer: Tokenizer, source: str | None = None) -> Corpus:
    """Every non-streaming source as a Corpus (a task or a streamed dataset is not one)."""
    source = config.source if source is None else source
    if source.startswith("task:"):
        raise ValueError("a task source produces batches, not a corpus")
    if is_shard_dir(source):
        corpus, shard_tokenizer = read_shards(source)
        if (
            shard_tokenizer.vocab_size != tokenizer.vocab_size
            or shard_tokenizer.name != tokenizer.name
        ):
            raise ValueError(
                f"shards in {source} use the {shard_tokenizer.name!r} tokenizer, data.tokenizer "
                f"is {tokenizer.name!r} (leave data.tokenizer at 'auto')"
            )
        return corpus
    if source.startswith("hf:"):
        return tokenize_documents(hf_documents(config, source), tokenizer, repr(source))
    return tokenize_documents(iter_texts(config, source), tokenizer, repr(source))
