"""``titans train`` and ``titans prepare``: thin argparse over ``train()`` and ``prepare()``.

titans train                                  # the quickstart preset: no download
titans train --preset debug --set train.steps=100 --set model.dim=64
titans train --config run.toml --resume       # continue the run in train.out_dir
titans prepare books/ --out shards --tokenizer gpt2
titans train --data shards --set data.mode=stream
"""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import CheckpointError

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def add_parser(subparsers) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a model (no arguments: a small model on text shipped with the package)",
        description="Settings: --preset, then --config FILE (TOML/JSON), then --set overrides.",
    )
    train.add_argument("--preset", default="quickstart", help="run preset (debug, quickstart)")
    train.add_argument("--config", help="TOML or JSON file with [model] [data] [optim] [train]")
    train.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one setting, e.g. train.steps=200 or model.dim=128 (repeatable)",
    )  # fmt: skip
    train.add_argument("--model", help="architecture (shortcut for --set model.name=...)")
    train.add_argument("--data", help="data source (shortcut for --set data.source=...)")
    train.add_argument("--steps", type=int, help="shortcut for --set train.steps=...")
    train.add_argument("--out", help="run directory (shortcut for --set train.out_dir=...)")
    train.add_argument(
        "--resume", nargs="?", const=True, default=False, metavar="DIR",
        help="continue from the run directory's latest checkpoint (or from DIR)",
    )  # fmt: skip
    train.set_defaults(func=run_train)

    prep = subparsers.add_parser("prepare", help="tokenise text into memory-mapped shards")
    prep.add_argument("sources", nargs="+", help="text files, folders, globs, .jsonl, hf:NAME")
    prep.add_argument("--out", required=True, help="output folder (must not hold shards)")
    prep.add_argument("--tokenizer", default="bytes", help="bytes, gpt2, hf:NAME_OR_PATH")
    prep.add_argument("--text-field", default="text", help="JSONL / dataset text field")
    prep.add_argument("--hf-split", default="train", help="dataset split for hf: sources")
    prep.add_argument("--shard-tokens", type=int, default=1 << 28, help="tokens per shard")
    prep.set_defaults(func=run_prepare)


def _overrides(args: argparse.Namespace) -> list[str]:
    shortcuts = {"model.name": args.model, "data.source": args.data, "train.steps": args.steps}
    shortcuts["train.out_dir"] = args.out
    return [f"{k}={v}" for k, v in shortcuts.items() if v is not None] + list(args.overrides)


def run_train(args: argparse.Namespace) -> int:
    from .config import build_config
    from .loop import NonFiniteError, Trainer

    try:
        config = build_config(args.preset, args.config, _overrides(args))
        trainer = Trainer(config, resume=args.resume)
        print(_banner(trainer), file=sys.stderr)
        result = trainer.run()
    except NonFiniteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (ValueError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result.stopped_by:
        print(f"resume with: titans train ... --resume {result.run_dir}", file=sys.stderr)
        return EXIT_CODES[result.stopped_by]
    _report(trainer, result)
    return 0


def _banner(trainer) -> str:
    config, model = trainer.config, trainer.model
    return (
        f"{config.model.name}: {model.num_parameters():,} parameters on {trainer.device}; "
        f"data {config.data.source} ({config.data.mode} mode); steps {trainer.step} -> "
        f"{config.train.steps}; run directory {trainer.run_dir}"
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
    tokens = trainer.config.train.sample_tokens
    if tokens and trainer.pipeline.tokenizer is not None:
        print(f"sample:\n{sample_text(trainer, tokens)}")
        print(f"more: titans generate --checkpoint {result.run_dir} --prompt 'HAMLET:'")


def sample_text(trainer, max_new_tokens: int, prompt_tokens: int = 32) -> str:
    """A continuation of the start of the validation text, as the model writes it."""
    from ..generate import generate

    batches, _ = trainer.pipeline.make_val()
    prompt = batches.next().inputs[:1, :prompt_tokens].to(trainer.device)
    ids = generate(trainer.model.eval(), prompt, max_new_tokens, temperature=0.8, top_k=40, seed=0)
    return trainer.pipeline.tokenizer.decode(ids[0].tolist())


def run_prepare(args: argparse.Namespace) -> int:
    from ..tokenizer import load_tokenizer
    from .prepare import prepare

    try:
        tokenizer = load_tokenizer(args.tokenizer)
        meta = prepare(
            args.sources, args.out, tokenizer, text_field=args.text_field,
            shard_tokens=args.shard_tokens, hf_split=args.hf_split,
        )  # fmt: skip
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    docs = sum(s["num_docs"] for s in meta["shards"])
    print(
        f"{args.out}: {meta['num_tokens']:,} tokens, {docs:,} documents, "
        f"{len(meta['shards'])} shards"
    )
    return 0
