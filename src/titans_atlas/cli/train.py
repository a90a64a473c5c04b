"""``titans train`` and ``titans prepare``: thin argparse over ``train()`` and ``prepare()``.

titans train                                  # the quickstart preset: no download
titans train --preset debug --set train.steps=100 --set model.dim=64
titans train --config run.toml --resume       # continue the run in train.out_dir
titans prepare books/ --out shards --tokenizer gpt2
titans train --data shards --set data.mode=stream
torchrun --nproc-per-node 8 -m titans_atlas train --config run.toml --set train.strategy=fsdp
titans consolidate runs/x/checkpoints/step_00001000    # a sharded checkpoint -> model/
"""

from __future__ import annotations

import argparse
import sys

import torch

from ..generation import generate
from ..io import CheckpointError, load_model
from ..tokenizers import load_tokenizer
from ..train.checkpointing import consolidate
from ..train.config import RUN_PRESETS, build_config
from ..train.data.prepare import prepare
from ..train.distributed import Parallel, setup_parallel
from ..train.loop import NonFiniteError, Trainer
from ..validation import int_at_least
from .recall_report import control_config, is_recall_run, report

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def add_parser(subparsers) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a model (no arguments: a small model on text shipped with the package)",
        description="Settings: --preset, then --config FILE (TOML/JSON), then --set overrides.",
    )
    train.add_argument(
        "--preset", default="quickstart",
        help=f"run preset ({', '.join(sorted(RUN_PRESETS))}; default quickstart)",
    )  # fmt: skip
    train.add_argument("--config", help="TOML or JSON file with [model] [data] [optim] [train]")
    train.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one setting, e.g. train.steps=200 or model.dim=128 (repeatable)",
    )  # fmt: skip
    train.add_argument("--model", help="architecture (shortcut for --set model.name=...)")
    train.add_argument("--data", help="data source (shortcut for --set data.source=...)")
    train.add_argument("--steps", type=int_at_least(1), help="shortcut for --set train.steps=...")
    train.add_argument("--out", help="run directory (shortcut for --set train.out_dir=...)")
    train.add_argument(
        "--resume", nargs="?", const=True, default=False, metavar="DIR",
        help="continue from the run directory's latest checkpoint (or from DIR)",
    )  # fmt: skip
    train.add_argument(
        "--force", action="store_true",
        help="start a fresh run in a run directory that holds one (its checkpoints, metrics "
        "and run_config are deleted); without it such a directory is refused",
    )  # fmt: skip
    train.set_defaults(func=run_train)

    prep = subparsers.add_parser("prepare", help="tokenise text into memory-mapped shards")
    prep.add_argument("sources", nargs="+", help="text files, folders, globs, .jsonl, hf:NAME")
    prep.add_argument("--out", required=True, help="output folder (must not hold shards)")
    prep.add_argument("--tokenizer", default="bytes", help="bytes, gpt2, hf:NAME_OR_PATH")
    prep.add_argument("--text-field", default="text", help="JSONL / dataset text field")
    prep.add_argument("--hf-split", default="train", help="dataset split for hf: sources")
    prep.add_argument(
        "--shard-tokens", type=int_at_least(1), default=1 << 28, help="tokens per shard"
    )
    prep.set_defaults(func=run_prepare)

    merge = subparsers.add_parser(
        "consolidate",
        help="write the model directory (load_model / generate) of a sharded checkpoint",
    )
    merge.add_argument("checkpoint", help="a sharded checkpoint, or a run directory (its latest)")
    merge.add_argument("--out", help="output model directory (default: the checkpoint's model/)")
    merge.set_defaults(func=run_consolidate)


def _overrides(args: argparse.Namespace) -> list[str]:
    shortcuts = {"model.name": args.model, "data.source": args.data, "train.steps": args.steps}
    shortcuts["train.out_dir"] = args.out
    return [f"{k}={v}" for k, v in shortcuts.items() if v is not None] + list(args.overrides)


def run_train(args: argparse.Namespace) -> int:
    parallel = Parallel()
    try:
        config = build_config(args.preset, args.config, _overrides(args))
        parallel = setup_parallel(config.train)
        trainer = Trainer(config, resume=args.resume, parallel=parallel, force=args.force)
        if parallel.main:
            print(_banner(trainer), file=sys.stderr)
        result = trainer.run()
    except NonFiniteError as err:
        return _fail(err, 1, parallel)
    except (ValueError, CheckpointError, OSError) as err:  # OSError: a full or lost disk
        return _fail(err, 2, parallel)
    except (MemoryError, RuntimeError) as err:
        if not _out_of_memory(err):
            _fail(err, 1, parallel, quiet=True)
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return _fail(
            RuntimeError(
                f"out of memory ({first}): a smaller model.dim, model.depth, "
                "train.batch_size or train.seq_len needs less"
            ),
            2,
            parallel,
        )
    except BaseException as err:  # under torchrun: name the rank, then let it propagate
        _fail(err, 1, parallel, quiet=True)
        raise
    try:
        if result.stopped_by:
            if parallel.main:
                print(f"resume with: titans train ... --resume {result.run_dir}", file=sys.stderr)
            return EXIT_CODES[result.stopped_by]
        if parallel.main:
            _report(trainer, result)
        return 0
    finally:
        parallel.close()


def _out_of_memory(err: BaseException) -> bool:
    """An allocation that failed (CPU allocator, CUDA, MPS), not a bug's RuntimeError."""
    if isinstance(err, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(err)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def _fail(err: BaseException, code: int, parallel, quiet: bool = False) -> int:
    """Print the error (naming the rank in a distributed run) and record it for torchrun,
    whose summary then names this rank and message as the root cause."""
    import os

    rank = f" (rank {parallel.rank} of {parallel.world_size})" if parallel.distributed else ""
    if not quiet:
        print(f"error{rank}: {err}", file=sys.stderr, flush=True)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        handler = get_error_handler()
        handler.initialize()
        handler.record_exception(err)
    return code


def _banner(trainer) -> str:
    config, model = trainer.config, trainer.model
    return (
        f"{config.model.name}: {model.num_parameters():,} parameters on {trainer.device}; "
        f"data {config.data.source} ({config.data.mode} mode); steps {trainer.step} -> "
        f"{config.train.steps}; run directory {trainer.run_dir}; "
        f"compile: {trainer.compile_choice.reason}"
    )


def _report(trainer, result) -> None:
    """Final numbers and a generated sample on stdout."""
    if "val_bpb" in result.eval:
        print(
            f"validation: {result.eval['val_bpb']:.4f} bits per byte, "
            f"loss {result.eval['val_loss']:.4f}"
        )
    elif result.eval:
        print(
            f"validation: accuracy {result.eval['val_accuracy']:.3f}, "
            f"loss {result.eval['val_loss']:.4f}"
        )
    print(f"checkpoint: {result.checkpoint}")
    if is_recall_run(trainer.config):
        _recall_report(trainer, result)
        return
    tokens = trainer.config.train.sample_tokens
    model = trainer.model
    if trainer.parallel.strategy == "fsdp":  # one rank cannot run a sharded model alone
        model = _exported_model(result.checkpoint, trainer.device)
    if tokens and model is not None:
        print(f"sample:\n{sample_text(trainer, tokens, model)}")
        prompt = "0 1" if trainer.pipeline.tokenizer.name == "ids" else "HAMLET:"
        print(f"more: titans generate --checkpoint {result.run_dir} --prompt '{prompt}'")


def _recall_report(trainer, result) -> None:
    """Recall by distance of the model and of ``train.control``, trained here and now."""
    models = {trainer.config.model.name: trainer.model}
    control = trainer.config.train.control
    if control is not None and trainer.parallel.distributed:
        print(f"control {control!r} not trained: run it alone with --set model.name={control}")
    elif control is not None:
        print(f"training the control: {control}, same settings", file=sys.stderr)
        # the control is retrained on every report: its directory belongs to this run
        control_trainer = Trainer(control_config(trainer.config, result.run_dir), force=True)
        control_trainer.run()
        models[f"{control} (control)"] = control_trainer.model
    print("recall accuracy by distance to the answer, and past the training length:")
    print(report(models, trainer.config, result.run_dir))


def _exported_model(checkpoint, device):
    if checkpoint is None or not (checkpoint / "model" / "config.json").is_file():
        return None
    return load_model(checkpoint / "model", device=device)


def sample_text(trainer, max_new_tokens: int, model=None, prompt_tokens: int = 32) -> str:
    """A continuation of the start of the validation text, as the model (default: the
    trainer's) writes it."""
    model = trainer.model if model is None else model
    batches, _ = trainer.pipeline.make_val()
    prompt = batches.next().inputs[:1, :prompt_tokens].to(trainer.device)
    ids = generate(model.eval(), prompt, max_new_tokens, temperature=0.8, top_k=40, seed=0)
    return trainer.pipeline.tokenizer.decode(ids[0].tolist())


def run_prepare(args: argparse.Namespace) -> int:
    try:
        tokenizer = load_tokenizer(args.tokenizer)
        meta = prepare(
            args.sources, args.out, tokenizer, text_field=args.text_field,
            shard_tokens=args.shard_tokens, hf_split=args.hf_split,
        )  # fmt: skip
    except (ValueError, OSError) as err:  # OSError: a disk that fills up, a folder gone
        print(f"error: {err}", file=sys.stderr)
        return 2
    docs = sum(s["num_docs"] for s in meta["shards"])
    print(
        f"{args.out}: {meta['num_tokens']:,} tokens, {docs:,} documents, "
        f"{len(meta['shards'])} shards"
    )
    return 0


def run_consolidate(args: argparse.Namespace) -> int:
    try:
        out = consolidate(args.checkpoint, args.out)
    except (ValueError, CheckpointError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"model directory: {out}")
    return 0
