"""Run settings: one ``RunConfig`` of dataclasses (model, data, optimiser, loop), named presets,
and ``key=value`` overrides checked against the fields.

Settings are applied in order: a preset (``RUN_PRESETS``), then an optional TOML or JSON file
(the same nesting as ``RunConfig.to_dict()``), then ``--set section.field=value`` overrides.
A key that is not a field is a ValueError naming it and the closest valid names
(``config_overrides.py`` holds the parsing and checking of keys and values).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any

from ...compiling import check_compile_setting
from ...models.backbone import MODELS, model_config
from ...models.config import ModelConfig
from ...validation import check_bool, check_number
from .overrides import apply_nested, read_config_file, set_value, suggest
from .presets import RUN_PRESETS

STRATEGIES = ("auto", "none", "ddp", "fsdp")


def _at_least(name: str, value: Any, minimum: int) -> None:
    """``check_int``'s test in the words run settings have always used ("train.steps must be
    >= 1"), which scripts match."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (an integer), got {value!r}")


@dataclass
class ModelSpec:
    """Which model: ``model_config(name, preset, **overrides)`` (ModelConfig or MemoryConfig
    fields in ``overrides``, e.g. ``{"dim": 128, "chunk_size": 32}``)."""

    name: str = "lmm"
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def build(self) -> ModelConfig:
        return model_config(self.name, self.preset, **self.overrides)


@dataclass
class DataConfig:
    """Where tokens come from and how they are cut into batches.

    ``source``: ``"builtin:shakespeare"`` (shipped with the package), a text file, a folder or
    glob of text files, a ``.jsonl`` file, a shard folder written by ``titans prepare``,
    ``"hf:NAME"`` (Hugging Face ``datasets``) or ``"task:NAME"`` (a synthetic task).
    ``mode``: ``"packed"`` (independent windows, fresh state) or ``"stream"`` (each batch row
    reads its documents in consecutive windows with the model state carried).
    ``task_args``: the arguments of a ``"task:NAME"`` source. ``build_config`` refuses them
    with any other source, and drops a preset's when the file or overrides set another
    source (``--preset recall --data FILE``: the preset's task does not follow).
    """

    source: str = "builtin:shakespeare"
    tokenizer: str = "auto"  # "auto" (shards: their own; else bytes), "bytes", "gpt2", "hf:NAME"
    mode: str = "packed"
    val_fraction: float = 0.05
    val_source: str | None = None  # a separate validation source instead of a split
    text_field: str = "text"  # JSONL / datasets field holding the text
    hf_split: str = "train"
    hf_config: str | None = None
    hf_streaming: bool = False
    stream_tokens: int = 0  # stream mode: streams of at most this (0: auto; a task needs it)
    task_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.source, str) and self.source.strip()):  # "": the working dir
            raise ValueError(
                "data.source must name a file, folder, shard folder, builtin:NAME, task:NAME "
                f"or hf:NAME, got {self.source!r}"
            )
        if self.val_source is not None and not isinstance(self.val_source, str):
            raise ValueError(f"data.val_source must be a source or null, got {self.val_source!r}")
        if self.mode not in ("packed", "stream"):
            raise ValueError(f"data.mode must be 'packed' or 'stream', got {self.mode!r}")
        check_number("data.val_fraction", self.val_fraction, 0.0, 1.0, open_low=False)
        _at_least("data.stream_tokens", self.stream_tokens, 0)
        check_bool("data.hf_streaming", self.hf_streaming)


@dataclass
class OptimConfig:
    """AdamW with warmup then cosine decay to ``min_lr_ratio * lr``."""

    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    schedule: str = "cosine"  # "cosine" | "constant"

    def __post_init__(self) -> None:
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(
                f"optim.schedule must be 'cosine' or 'constant', got {self.schedule!r}"
            )
        check_number("optim.lr", self.lr, 0.0)
        check_number("optim.min_lr_ratio", self.min_lr_ratio, 0.0, 1.0, False, False)
        _at_least("optim.warmup_steps", self.warmup_steps, 0)
        check_number("optim.weight_decay", self.weight_decay, 0.0, open_low=False)
        for name in ("beta1", "beta2"):
            check_number(f"optim.{name}", getattr(self, name), 0.0, 1.0, open_low=False)
        check_number("optim.eps", self.eps, 0.0)


@dataclass
class TrainConfig:
    """The loop: sizes, precision, evaluation, checkpoints, logging."""

    steps: int = 1000
    batch_size: int = 16
    seq_len: int = 128
    grad_accum: int = 1
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    precision: str = "auto"  # "auto" (bf16 autocast on CUDA, fp32 on CPU) | "fp32" | "bf16"
    threads: int = 0  # torch CPU threads (0: torch's default)
    # "auto": compile when the run is long enough to earn the compile time back (decided from
    # its first steps' time, titans_atlas.compiling), and never where it cannot work; a
    # compile that fails falls back to eager with one line. For bit-exact resume across a
    # stop, set true or false: "auto" decides again, from the time left, when it resumes.
    compile: bool | str = "auto"
    memory_checkpoint: bool = False  # recompute the memory's chunks in backward
    activation_checkpoint: bool = False  # recompute each block in backward
    # Several processes (torchrun): "auto" = DDP under a multi-process launch, else one
    # process; "ddp" / "fsdp" (FSDP2, per block then the root) also with a world of one.
    strategy: str = "auto"  # "auto" | "none" | "ddp" | "fsdp"
    dist_timeout: float = 600.0  # seconds a collective may wait for the other ranks
    export_model: bool = True  # sharded checkpoints also hold model/ (load_model reads it)
    eval_every: int = 200  # 0: only after the last step
    eval_tokens: int = 65536  # validation tokens per evaluation (0: all)
    log_every: int = 10
    checkpoint_every: int = 200  # 0: only after the last step (and when stopped)
    keep_last: int = 2
    out_dir: str = "runs/titans"
    tensorboard: bool = False
    progress: bool = True
    sample_tokens: int = 200  # generated after training by the CLI (0: none)
    # `titans train` on the recall task: a control model (e.g. "swa") trained after the run
    # with the same settings into OUT_DIR/control, its recall reported beside the model's.
    control: str | None = None
    # Fine-tuning: start from the weights of this run directory, training checkpoint or model
    # directory (fresh optimiser, step 0); its model config must equal this run's.
    init_from: str | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "grad_accum", "log_every", "keep_last"):
            _at_least(f"train.{name}", getattr(self, name), 1)
        for name in ("eval_every", "checkpoint_every", "eval_tokens", "sample_tokens", "seed"):
            _at_least(f"train.{name}", getattr(self, name), 0)
        _at_least("train.threads", self.threads, 0)  # 0: torch's default
        if self.seed >= 2**32:  # the task batches' generators are seeded with seed * ~1e6
            raise ValueError(f"train.seed must be < 2**32, got {self.seed}")
        # an empty out_dir is the current folder, which --force would clear of checkpoints
        if not isinstance(self.out_dir, str) or not self.out_dir.strip():
            raise ValueError(f"train.out_dir must name a run folder, got {self.out_dir!r}")
        check_number("train.grad_clip", self.grad_clip, 0.0, open_low=False)  # 0: no clipping
        self.compile = check_compile_setting("train.compile", self.compile)
        for name in ("memory_checkpoint", "activation_checkpoint", "export_model",
                     "tensorboard", "progress"):  # fmt: skip
            check_bool(f"train.{name}", getattr(self, name))
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"train.precision must be auto/fp32/bf16, got {self.precision!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"train.strategy must be one of {'/'.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if self.control is not None and self.control not in MODELS:
            raise ValueError(
                f"train.control must name a model of {sorted(MODELS)}, got {self.control!r}"
            )
        check_number("train.dist_timeout (seconds)", self.dist_timeout, 0.0)


@dataclass
class RunConfig:
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        return apply_nested(cls(), data)


# Fields that may differ between a checkpoint and the run that resumes it.
RESUMABLE = {"train." + n for n in (
    "steps", "device", "threads", "compile", "memory_checkpoint", "eval_every", "eval_tokens",
    "log_every", "checkpoint_every", "keep_last", "out_dir", "tensorboard", "progress",
    "sample_tokens", "activation_checkpoint", "strategy", "dist_timeout", "export_model",
    "init_from",
)}  # fmt: skip


def build_config(
    preset: str = "quickstart",
    config_file: str | Path | None = None,
    overrides: list[str] | dict[str, Any] = (),
) -> RunConfig:
    """Preset -> config file -> overrides (``["train.steps=100", ...]`` or a dict)."""
    if preset not in RUN_PRESETS:
        raise ValueError(f"unknown preset {preset!r}{suggest(preset, sorted(RUN_PRESETS))}")
    config = apply_nested(RunConfig(), RUN_PRESETS[preset])
    from_file = read_config_file(config_file) if config_file is not None else {}
    items = list(overrides.items() if isinstance(overrides, dict) else map(_split, overrides))
    if _source_set(from_file, items) not in (None, config.data.source):
        # the preset's task arguments belong to its source; ones the file or the overrides
        # give are applied below, whatever their order relative to data.source
        config = replace(config, data=replace(config.data, task_args={}))
    if config_file is not None:
        config = apply_nested(config, from_file)
    for key, value in items:
        config = set_value(config, key, value)
    if config.data.task_args and not config.data.source.startswith("task:"):  # else ignored
        raise ValueError(
            f"data.task_args apply only to a task source (data.source='task:NAME'); "
            f"data.source is {config.data.source!r}"
        )
    config.model.build()  # validate the model part now, not at the first step
    return config


def _source_set(from_file: dict[str, Any], items: list[tuple[str, Any]]) -> Any:
    """The ``data.source`` a config file and overrides end with, None if they set none."""
    data = from_file.get("data") if isinstance(from_file, dict) else None
    source = data.get("source") if isinstance(data, dict) else None
    for key, value in items:
        if key == "data.source":
            source = value
    return source


def _split(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"override {item!r} must look like section.field=value")
    return key.strip(), value.strip()


def config_differences(
    saved: dict[str, Any], current: dict[str, Any], prefix: str = ""
) -> list[str]:
    """Dotted keys whose values differ between two ``to_dict()`` trees."""
    keys = sorted(set(saved) | set(current))
    out = []
    for key in keys:
        a, b, name = saved.get(key), current.get(key), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict) and not name.endswith("overrides"):
            out += config_differences(a, b, name + ".")
        elif a != b:
            out.append(name)
    return out


def is_dataclass_instance(obj: Any) -> bool:
    return is_dataclass(obj) and not isinstance(obj, type)


def resume_differences(saved: dict[str, Any], config: RunConfig, world_size: int) -> list[str]:
    """Settings that keep a run from resuming a checkpoint's ``saved`` trainer state.
    ``train.batch_size`` counts rows per process: another world size may resume with
    another value as long as the global batch (rows x processes) is the same."""
    differ = [
        k for k in config_differences(saved["config"], config.to_dict()) if k not in RESUMABLE
    ]
    saved_data = saved["config"].get("data", {})
    if not str(saved_data.get("source", "")).startswith("task:"):
        # a run saved before task arguments were refused on other sources may hold a
        # preset's, which it ignored: they do not keep it from resuming
        differ = [k for k in differ if not k.startswith("data.task_args")]
    saved_world = saved.get("world_size", 1)
    saved_rows = saved["config"]["train"]["batch_size"]
    rows = config.train.batch_size
    if "train.batch_size" in differ:
        differ.remove("train.batch_size")
    # also with batch_size unchanged: another world size is another global batch (data order,
    # and a task's stream ages and seeds, follow the global row)
    step = saved.get("step", 0)
    if config.train.steps < step:  # nothing would run, and nothing would say so
        differ.append(f"train.steps ({config.train.steps} is below the saved step {step})")
    if saved_rows * saved_world != rows * world_size:
        differ.append(
            f"train.batch_size (the global batch is rows x processes: {saved_rows} x "
            f"{saved_world} when saved, {rows} x {world_size} now)"
        )
    return differ
