"""``titans eval``: run one evaluation task on a saved model; writes a JSON result and a PNG.

titans eval --checkpoint DIR --task sniah-pk --lengths 1K 2K 4K --out results/
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time

from ..compiling import DECODE_PAYS_AFTER_STEPS
from ..eval.extras import MissingDependencyError
from ..eval.inference import Evaluator
from ..eval.loading import load_checkpoint
from ..eval.registry import TASKS, EvalSettings, list_tasks, run_task
from ..eval.results import checkpoint_record, write_result
from ..io import CheckpointError
from ..memory_estimate import MemoryBudgetError
from ..validation import MAX_SEED, check_device, check_writable_dir, int_at_least

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}


def parse_length(text: str) -> int:
    """ "1K" -> 1024, "64k" -> 65536, "1M" -> 1048576, "300" -> 300."""
    match = re.fullmatch(r"(\d+)([kKmM]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a length: {text!r} (e.g. 512, 1K, 64K, 1M)")
    return int(match.group(1)) * _SUFFIX[match.group(2).lower()]


def add_parser(subparsers) -> None:
    tasks = "; ".join(f"{name}: {TASKS[name].label}" for name in list_tasks())
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a saved model (perplexity, S-NIAH, BABILong, MQAR, ...)",
        description=f"Run an evaluation task on a model directory. Tasks -- {tasks}.",
    )
    parser.add_argument(
        "--checkpoint", required=True, help="model directory (config.json + model.safetensors)"
    )
    parser.add_argument("--task", required=True, choices=list_tasks())
    parser.add_argument(
        "--lengths",
        nargs="+",
        type=parse_length,
        default=(),
        help="context lengths in tokens (1K = 1024)",
    )
    parser.add_argument("--depths", nargs="+", type=float, help="needle depths in [0, 1]")
    parser.add_argument(
        "--distances",
        nargs="+",
        type=parse_length,
        default=(),
        help="kv-recall distances in tokens",
    )
    parser.add_argument("--samples", type=int_at_least(1), default=4, help="samples per cell")
    parser.add_argument("--seed", type=int_at_least(0, MAX_SEED), default=0)
    parser.add_argument("--out", default="eval_results", help="folder for the JSON and PNG")
    parser.add_argument("--text", help="perplexity: a UTF-8 text file")
    parser.add_argument(
        "--bin-size", type=parse_length, default=1024, help="perplexity: tokens per curve bin"
    )
    parser.add_argument(
        "--haystack-dir", help="folder of book *.txt files (S-NIAH essay, BABILong-style)"
    )
    parser.add_argument("--babi-dir", help="folder of bAbI qaN_*_test.txt files")
    parser.add_argument("--babi-split", default="test", choices=("test", "train"))
    parser.add_argument("--babi-tasks", nargs="+", default=("qa1", "qa2", "qa3", "qa4", "qa5"))
    parser.add_argument(
        "--dataset", default="RMT-team/babilong", help="BABILong: hub name or local copy"
    )
    parser.add_argument("--scoring", default="likelihood", choices=("likelihood", "greedy"))
    parser.add_argument(
        "--max-new-tokens", type=int_at_least(1), help="greedy answers: tokens to generate"
    )
    parser.add_argument(
        "--kv-pairs", type=int_at_least(1), help="MQAR / kv-recall: key-value pairs per sequence"
    )
    parser.add_argument(
        "--piece-size", type=parse_length, default=2048, help="tokens per model call"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--compile", choices=("auto", "true", "false"), default="auto",
        help=f"compile greedy decoding (auto: after {DECODE_PAYS_AFTER_STEPS:,} eager steps)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", choices=["torch", "mlx"], default="torch",
        help="mlx: run the model with MLX (extra [mlx]), scored by the same code",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int_at_least(1), help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument(
        "--force", action="store_true", help="run even if the memory estimate exceeds what is free"
    )
    parser.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> EvalSettings:
    """Every ``EvalSettings`` field has the flag of its name (``--bin-size`` -> ``bin_size``);
    a flag left unset (None, e.g. ``--depths``) keeps the field's default; lists -> tuples."""
    options = {}
    for field in dataclasses.fields(EvalSettings):
        value = getattr(args, field.name, None)
        if value is not None:
            options[field.name] = tuple(value) if isinstance(value, list | tuple) else value
    return EvalSettings(**options)


class Progress:
    """One stderr line per scored sample, and, while a long input is read, one every
    ``every`` seconds: a long evaluation is never silent."""

    KEYS = ("task", "length", "depth", "distance", "kv_pairs")

    def __init__(self, every: float = 10.0) -> None:
        self.every, self.start = every, time.perf_counter()
        self.last = self.start

    def sample(self, index: int, outcome: dict) -> None:
        where = ", ".join(f"{k} {outcome[k]}" for k in self.KEYS if k in outcome)
        score = outcome.get("score")
        scored = f"score {score:.3f}" if isinstance(score, float | int) else "scored"
        self.say(f"sample {index + 1} ({where}): {scored}")

    def tokens(self, done: int, total: int) -> None:
        if time.perf_counter() - self.last >= self.every:
            self.say(f"read {done:,} of {total:,} tokens")

    def say(self, text: str) -> None:
        self.last = time.perf_counter()
        print(f"[{self.last - self.start:7.1f} s] {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        # everything the run will need, checked before it loads or computes anything: an
        # --out that is a file used to be found only when the results were written
        settings = settings_from(args)
        check_writable_dir("--out", args.out)
        if args.backend == "torch":
            check_device("--device", args.device)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        loaded = load_checkpoint(args.checkpoint, device=args.device, backend=args.backend)
        print(f"{TASKS[args.task].label} on {loaded.model_dir} (sha256 {loaded.sha256[:12]})")
        progress = Progress()
        if settings.longest() >= 1 << 20:  # building such a prompt alone takes seconds
            progress.say(f"building prompts of up to {settings.longest():,} tokens")
        evaluator = Evaluator(
            loaded.model, piece_size=settings.piece_size, force=settings.force,
            on_tokens=progress.tokens, compile=args.compile,
        )  # fmt: skip
        result = run_task(
            args.task, loaded.model, loaded.tokenizer, settings, evaluator=evaluator,
            progress=progress.sample,
        )  # fmt: skip
        result["checkpoint"] = checkpoint_record(loaded)
        json_path, png_path = write_result(result, args.out)
    except (ValueError, CheckpointError, OSError, MissingDependencyError, MemoryBudgetError) as err:
        print(f"titans eval: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result["summary"], indent=1, default=str))
    print(f"{result['seconds']:.1f} s; wrote {json_path} and {png_path}")
    return 0
