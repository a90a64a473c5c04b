"""Recall beyond the attention window (issue 10; research/LOG.md).

Trains one model with the library's own loop on the ``recall`` preset (key-value recall,
``kv_multi``: 4 pairs among noise, all queried at the end; an 8-token attention window,
128-token sequences), then
measures recall accuracy against the distance -- in units of the window, at the training
length -- and at 2x-16x the training length, with the answer at the far end. One JSON line per
run is appended to ``--results``; ``--plot`` draws every line in the file into one figure and
prints the markdown table.

    python research/experiments/recall_by_distance.py --model lmm --seed 0
    python research/experiments/recall_by_distance.py --model swa --seed 0
    python research/experiments/recall_by_distance.py --plot
    python research/experiments/recall_by_distance.py --model omeganet --seed 3 --evaluate-only \
        --test-decay-min 1e-4     # that run's checkpoint, evaluated with a lower decay floor

A run trains into ``runs/recall/<model>-seed<seed>-<hash of the --set values and --steps>``
and trains again from scratch if repeated (seeded: the same result); ``--evaluate-only``
evaluates the finished run of the same options instead.

Each run is seeded (data, initialisation); one CPU thread, so runs can go side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from pathlib import Path

from _common import (  # experiments/ is on sys.path when run
    QUIET,
    add_evaluation_options,
    evaluation_overrides,
    experiment_parser,
    load_finished,
    read_records,
    run_or_plot,
    set_decay_floor,
    short_override,
)

from titans_atlas.eval.distance import recall_by_distance
from titans_atlas.train import Trainer, build_config

RESULTS = Path("docs/results/recall.jsonl")
DISTANCES = (4, 8, 16, 32, 64, 120)  # at the training length: 1/2 to 15 windows
LENGTHS = (256, 512, 1024, 2048)  # 2x-16x the training length, answer LENGTH - 16 back
PAIRS, VOCAB = 4, 32


def run(args: argparse.Namespace) -> dict:
    if not 1 <= args.test_pairs <= VOCAB // 2 - 2:  # before training, not after it
        raise ValueError(f"--test-pairs must lie in [1, {VOCAB // 2 - 2}], got {args.test_pairs}")
    config = run_config(args)
    start = time.time()
    if args.evaluate_only:  # the training losses are in that run's own record
        model, losses = load_finished(Path(config.train.out_dir), config.train.steps), {}
    else:
        trainer = Trainer(config)
        model, losses = trainer.model, trainer.run().losses
    model.eval()
    if args.test_decay_min is not None:
        set_decay_floor(model, args.test_decay_min)
    measured = recall_by_distance(
        model, DISTANCES, args.lengths, train_length=128, vocab_size=VOCAB,
        num_pairs=args.test_pairs,
        samples=args.samples, seed=1000 + args.seed,
    )  # fmt: skip
    near, far = measured["distance"], measured["length"]
    last = sorted(losses)[-25:]
    return {
        "model": args.model,
        "task": config.data.source,
        "seed": args.seed,
        "overrides": args.set + evaluation_overrides(args) + _pairs_override(args),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": config.train.steps,
        "final_loss": round(sum(losses[s] for s in last) / len(last), 4) if last else None,
        "loss_curve": {str(s): round(losses[s], 4) for s in sorted(losses)[::25]},
        "window": model.config.window,
        "chance": 1 / (VOCAB // 2),
        "distance_accuracy": {str(d): round(a, 4) for d, a in near.items()},
        "length_accuracy": {str(n): round(a, 4) for n, a in far.items()},
        "seconds": round(time.time() - start),  # evaluation only with --evaluate-only
        "evaluated_only": args.evaluate_only,
        "samples": args.samples,
    }


def _pairs_override(args: argparse.Namespace) -> list[str]:
    return [] if args.test_pairs == PAIRS else [f"test:pairs={args.test_pairs}"]


def run_config(args: argparse.Namespace):
    """The recall preset with the run's overrides; its own run directory per override set."""
    tag = _tag([*args.set, str(args.steps)])
    overrides = [
        f"model.name={args.model}",
        f"train.seed={args.seed}",
        f"train.out_dir=runs/recall/{args.model}-seed{args.seed}-{tag}",
        *QUIET,
        "train.control=null",
        *args.set,
    ]
    if args.steps:
        overrides.append(f"train.steps={args.steps}")
    return build_config("recall", overrides=overrides)


def _tag(overrides: list[str]) -> str:
    """A run directory name per override set, so no run resumes another's checkpoint."""
    return hashlib.sha1(" ".join(overrides).encode()).hexdigest()[:8]


def run_styles(runs: list[dict]) -> list[dict]:
    """One colour per arm (a model with its overrides), a marker per seed, dashed lines for
    runs with overrides: with twenty runs a colour per run repeats, and the reader should find
    an arm's seeds at once."""
    arms = list(dict.fromkeys(_arm(item) for item in runs))
    palette = plt_colors(len(arms))
    markers = "osD^vP*X"
    return [
        dict(
            color=palette[arms.index(_arm(item))],
            marker=markers[item["seed"] % 8],
            linestyle="--" if item["overrides"] else "-",
        )
        for item in runs
    ]


def _arm(item: dict) -> str:
    return " ".join([item["model"], *item["overrides"]])


def plt_colors(count: int) -> list:
    import matplotlib

    return [matplotlib.colormaps["tab20" if count > 10 else "tab10"](i) for i in range(count)]


def plot(path: Path, out: Path, match: list[str] | None = None) -> None:
    """``match``: only the runs whose model and overrides contain one of these strings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [item for item in read_records(path) if not match or any(m in _arm(item) for m in match)]
    if not runs:
        raise ValueError(f"no run in {path} matches --plot-match {match}")
    fig, (left, right, curve) = plt.subplots(1, 3, figsize=(18, 5))
    for item, style in zip(runs, run_styles(runs)):
        overrides = " ".join(short_override(o) for o in item["overrides"])
        label = f"{item['model']} {overrides} (seed {item['seed']}, {item['steps']} steps)"
        near = item["distance_accuracy"]
        left.plot([int(d) / item["window"] for d in near], [100 * a for a in near.values()],
                  label=label, **style)  # fmt: skip
        far = item["length_accuracy"]
        right.plot([int(n) for n in far], [100 * a for a in far.values()], **style)
        losses = item.get("loss_curve", {})  # runs recorded before it existed have none
        curve.plot([int(s) for s in losses], list(losses.values()), linewidth=0.8,
                   color=style["color"], linestyle=style["linestyle"])  # fmt: skip
    for axis in (left, right):
        axis.axhline(100 / (VOCAB // 2), color="grey", linestyle=":", label="chance")
        axis.set_xscale("log", base=2)
        axis.set_ylim(0, 100)
        axis.grid(alpha=0.3)
    curve.axhline(math.log(VOCAB // 2), color="grey", linestyle=":")
    curve.set(xlabel="training step", ylabel="training loss (nats)", title="learning curves")
    curve.grid(alpha=0.3)
    left.axvline(1.0, color="black", linewidth=0.8)
    left.set(xlabel="distance to the answer (attention windows)", ylabel="recall accuracy (%)",
             title="trained length (128 tokens)")  # fmt: skip
    right.set(xlabel="sequence length (answer length - 16 back)", title="past the training length")
    fig.legend(*left.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(0.77, 0.5),
               fontsize=7)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 0.77, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")  # long labels: keep the whole legend
    print(table(runs))


def _loss(item: dict) -> str:
    """Final training loss; an --evaluate-only record has none (its run's record has it)."""
    return "as trained" if item["final_loss"] is None else f"{item['final_loss']:.2f}"


def table(runs: list[dict]) -> str:
    """Markdown, one row per run; a length some runs were not tested at shows "-"."""
    near = _keys(runs, "distance_accuracy")
    far = _keys(runs, "length_accuracy")
    # distances in tokens: runs may differ in window (the window column converts)
    head = ["model", "overrides", "window", "seed", "params", "steps", "loss"]
    head += [f"d={d}" for d in near] + [f"L={n}" for n in far] + ["minutes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for item in runs:
        cells = [item["model"], " ".join(item["overrides"]) or "-", str(item["window"]),
                 str(item["seed"]), f"{item['parameters'] / 1e3:.0f}k", str(item["steps"]),
                 _loss(item)]  # fmt: skip
        cells += _percentages(item["distance_accuracy"], near)
        cells += _percentages(item["length_accuracy"], far)
        cells.append(f"{item['seconds'] / 60:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _keys(runs: list[dict], field: str) -> list[str]:
    return sorted({key for item in runs for key in item[field]}, key=int)


def _percentages(accuracy: dict[str, float], keys: list[str]) -> list[str]:
    return [f"{100 * accuracy[k]:.0f}" if k in accuracy else "-" for k in keys]


def build_parser() -> argparse.ArgumentParser:
    parser = experiment_parser(__doc__, RESULTS, 0, "0: the preset's")
    parser.add_argument("--samples", type=int, default=200, help="queries per point")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=list(LENGTHS),
        help="sequence lengths of the length test (answer LENGTH - 16 back)",
    )  # fmt: skip
    parser.add_argument(
        "--test-pairs", type=int, default=PAIRS,
        help="pairs per evaluation row: the asked one and PAIRS - 1 distractors at random places",
    )  # fmt: skip
    parser.add_argument(
        "--plot-match", nargs="+", metavar="TEXT",
        help="with --plot: only the runs whose overrides contain one of these, into --plot-out",
    )  # fmt: skip
    parser.add_argument("--plot-out", type=Path, help="with --plot-match: the PNG to write")
    add_evaluation_options(parser)
    return parser


def check_plot_options(args: argparse.Namespace) -> None:
    """--plot-match and --plot-out only make sense together and with --plot: refuse either
    alone rather than run (or draw the full plot) and drop the option silently."""
    if args.plot_match and not args.plot:
        raise ValueError("--plot-match draws a subset of a results file: it needs --plot")
    if args.plot_match and args.plot_out is None:
        raise ValueError("--plot-match needs --plot-out (the full plot keeps its own PNG)")
    if args.plot_out is not None and not args.plot_match:
        raise ValueError("--plot-out names the subset's PNG: it needs --plot-match")


def main() -> None:
    args = build_parser().parse_args()
    check_plot_options(args)
    if args.plot_match:
        plot(args.results, args.plot_out, args.plot_match)
        return
    run_or_plot(args, run, plot)


if __name__ == "__main__":
    main()
