"""BABILong-style qa1: fine-tune on short rows, test on 4-16x longer ones (issue 10 item 3).

Starts from a model trained by ``books_lm.py`` (``runs/books_lm/MODEL-seed0``: byte-level,
~530k parameters, 64-byte attention window), fine-tunes it on the ``babilong_style`` task
(bAbI qa1 *train* questions, facts hidden in book sentences, 512-byte rows, only the answer
scored), then runs ``titans eval --task babilong-style`` on the qa1 *test* questions at
nominal lengths 768 / 2,048 / 4,096 / 8,192 tokens: contexts of 468 / 1,748 / 3,796 / 7,892
bytes, 1.0x / 3.9x / 8.4x / 17.5x the fine-tuning rows' ~450-byte contexts. Scored by the
benchmark's label ranking over the six locations (chance 16.7%). One JSON line per run.

    python research/experiments/books_lm.py --model lmm          # the starting point
    python research/experiments/babilong_finetune.py --model lmm
    python research/experiments/babilong_finetune.py --plot
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import (  # experiments/ is on sys.path when run
    QUIET,
    experiment_parser,
    read_records,
    run_or_plot,
)
from books_lm import SIZES

from titans_atlas.eval import EvalSettings, run_task
from titans_atlas.train import Trainer, build_config

DATA = Path(__file__).resolve().parents[2].parent / "shared/data"
RESULTS = Path("docs/results/babilong_qa1.jsonl")
ROW, CONTEXT = 512, 450  # fine-tuning row (bytes) and its context, roughly
LENGTHS = (768, 2048, 4096, 8192)  # the evaluation's nominal lengths: context = length - 300


def finetune_overrides(args: argparse.Namespace, start_from: Path, task_args: dict) -> list[str]:
    """The quickstart preset's overrides: fine-tune ``start_from`` on 512-byte qa1 rows."""
    return [
        f"model.name={args.model}",
        *SIZES.get(args.model, []),
        *([f"model.window={ROW}"] if args.model == "transformer" else []),
        "data.source=task:babilong_style",
        f"data.task_args={json.dumps(task_args)}",
        f"train.init_from={start_from}",
        f"train.seed={args.seed}",
        f"train.steps={args.steps}",
        f"train.seq_len={ROW}",
        "train.batch_size=8",
        "train.eval_every=0",
        "train.eval_tokens=8192",
        "optim.lr=1e-3",
        f"train.out_dir=runs/babilong_qa1/{args.model}-seed{args.seed}",
        *QUIET,
        *args.set,
    ]


def run(args: argparse.Namespace) -> dict:
    start_from = Path(f"runs/books_lm/{args.model}-seed{args.seed}")
    if not start_from.is_dir():
        raise SystemExit(
            f"missing {start_from}: run research/experiments/books_lm.py --model {args.model}"
        )
    task_args = {"babi_dir": str(DATA / "babi"), "haystack_dir": str(DATA / "gutenberg")}
    overrides = finetune_overrides(args, start_from, task_args)
    start = time.time()
    trainer = Trainer(build_config("quickstart", overrides=overrides))
    result = trainer.run()
    train_seconds = time.time() - start
    settings = EvalSettings(lengths=LENGTHS, samples=args.samples, babi_tasks=("qa1",),
                            babi_dir=task_args["babi_dir"],
                            haystack_dir=task_args["haystack_dir"])  # fmt: skip
    model = trainer.model.eval()
    scored = run_task("babilong-style", model, trainer.pipeline.tokenizer, settings)
    return {
        "model": args.model,
        "seed": args.seed,
        "overrides": args.set,
        "parameters": model.num_parameters(),
        "steps": result.step,
        "answer_accuracy": round(result.eval["val_accuracy"], 4),  # per answer token
        "lengths": list(LENGTHS),
        "accuracy": scored["summary"]["accuracy"][0],  # percent per length
        "samples": args.samples,
        "train_seconds": round(train_seconds),
        "seconds": round(time.time() - start),
    }


def plot(path: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_records(path)
    multiples = [(n - 300) / CONTEXT for n in LENGTHS]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, item in enumerate(runs):
        label = f"{item['model']} seed {item['seed']} ({item['steps']} steps)"
        ax.plot(multiples, item["accuracy"], marker="o", color=f"C{index}", label=label)
    ax.axhline(100 / 6, color="grey", linestyle=":", label="chance (1 in 6)")
    ax.set(xscale="log", xlabel="context length / fine-tuning context (~450 bytes)",
           ylabel="qa1 accuracy (%)", ylim=(0, 100),
           title="BABILong-style qa1, fine-tuned at 512 bytes")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    heads = " | ".join(f"{n} ({m:.1f}x)" for n, m in zip(LENGTHS, multiples))
    print(f"| model | seed | params | steps | answer tokens (val) | {heads} | minutes |")
    print("|---|---|---|---|---|" + "---|" * len(LENGTHS) + "---|")
    for item in runs:
        cells = [item["model"], str(item["seed"]), f"{item['parameters'] / 1e3:.0f}k",
                 str(item["steps"]),
                 f"{100 * item['answer_accuracy']:.0f}%", *[f"{a:.0f}%" for a in item["accuracy"]],
                 f"{item['seconds'] / 60:.1f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = experiment_parser(__doc__, RESULTS, 300)
    parser.add_argument("--samples", type=int, default=100, help="test questions per length")
    run_or_plot(parser.parse_args(), run, plot)


if __name__ == "__main__":
    main()
