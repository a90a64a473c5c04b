"""MQAR sweep, the Zoology protocol (Arora et al. 2023, "Zoology: measuring and improving
recall in efficient language models"): 2-layer models over a vocabulary of 8,192 ids learn
multi-query associative recall (``task:mqar``, Zoology's ``multiquery_ar``); each model is
trained at several widths, with a small learning-rate sweep of which the best run is kept,
and every run gets the same budget (steps x batch). Accuracy is measured on held-out MQAR
batches and plotted against the size of the state the model carries. Public API only;
resumable (runs already in ``--out`` are skipped).

    python research/mqar_sweep.py --grid quick           # smoke run: minutes
    python research/mqar_sweep.py                        # the CPU grid (below)
    python research/mqar_sweep.py --models gdn,lmm --widths 64,128 --settings 256:16
    python research/mqar_sweep.py --table --plot         # no training: the table, the plot

Grids (``GRIDS``; ``--settings`` / ``--widths`` / ``--lrs`` / ``--steps`` / ``--batch``
replace a grid's entry). A run is keyed by its settings, not by its grid, so a grid skips the
runs another grid already recorded:

* ``quick`` -- smoke: L=64 with 4 pairs, width 64, lr 3e-3, 150 steps x 32 sequences: 5 runs,
  1.5M tokens; 11 minutes on one shared core (2026-12-03, about 2,300 tokens/s).
* ``cpu`` (default) -- L=64 / 4 pairs and L=128 / 8 pairs, widths 64 and 128, learning rates
  1e-3 and 3e-3 (at L=64, width 64, 1e-2 was best for no model and sent lmm to 0%), the same
  150 steps x 32 (the quick grid's runs are among its runs): 40 runs for
  the 5 default models, 18M tokens, about 2 CPU-hours by the quick grid's rate (the
  width-128 runs cost more per token; sum the rows' seconds for the real cost). Its
  results are docs/results.md, section 3.
* ``zoology`` -- Zoology's figure: L/pairs 64/4, 128/8, 256/16, 512/64, widths 64, 128,
  256, learning rates logspace(-4, -2, 4); accelerator-sized (Zoology trains 64 epochs of
  100k sequences; here 2,000 steps x 64 unless ``--steps`` / ``--batch`` say otherwise).

Models (``--models``, any registered name; default transformer, swa, gdn, lmm, mag): 2
blocks (``model.depth=2``), head width 64 (``num_heads = width / 64``), no persistent
tokens (Zoology's models have none), a 16-token window for the windowed attention
(``--window``), and memory chunks of at most 16 tokens (``CHUNK``; ``gdn`` keeps its exact
sequential rule, chunk 1). ``--set KEY=VALUE`` adds any run setting (and marks the rows).

State size (``state_size``, floats per sequence summed over the layers, at length L):

* attention layer: 2 x width x the keys it keeps -- L for full attention (the
  Transformer's KV cache at the sequence length), min(window, L) for a window (SWA's, the
  hybrids' attention branch), min(segment, L) for MAC's segments (its retrieved tokens
  not counted);
* memory layer: the memory's weights per head x heads (``NeuralMemory.initial_weights``:
  a linear memory H x Dk x Dv -- ``gdn``: H x 64 x 64 -- an MLP memory H x 2 x 4 x 64 x 64 at
  expansion 4), twice that when the layer carries a momentum (``momentum_max > 0``:
  Titans' S_t has the weights' shape; ``gdn`` has none).

Short-convolution caches ((kernel - 1) x 3 x width per memory layer) and persistent tokens
(not input-dependent) are left out.

Accuracy: the run's own validation (held-out seeds) picks the best learning rate per
(setting, model, width); the reported accuracy is on ``--samples`` further MQAR sequences
from seeds no training batch uses (training draws even numpy seeds; these are odd), scored
with the evaluation's ``labelled_accuracy`` (argmax over the query positions).

One row per run in a JSON-lines file: grid, setting, model, width, lr, seed, steps, batch,
parameters, state size, final training loss, validation and test accuracy, seconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from titans_atlas.eval.mqar import labelled_accuracy
from titans_atlas.layers import Attention, NeuralMemory
from titans_atlas.models.atlas import PRESET_MEMORY_BEFORE
from titans_atlas.tasks import mqar_batch
from titans_atlas.train import Trainer, build_config

VOCAB = 8192
DEFAULT_MODELS = "transformer,swa,gdn,lmm,mag"
TEST_SEED = 1_000_001  # odd: training batches are drawn from even seeds
EVAL_ROWS = 64  # test sequences per forward
CHUNK = 16  # the largest memory chunk: a chunk reads the weights of its start
# What makes a run (a row with the same values is not run again): the grids share runs, so
# the quick grid's rows are the first cell of the cpu grid's.
KEY_FIELDS = ("seq_len", "pairs", "model", "width", "lr", "seed", "steps", "batch", "window",
              "overrides", "output_init", "inner_step")  # fmt: skip
NO_MEMORY = ("transformer", "swa")  # the attention controls
# Presets whose memory values moved (the library's table), as the settings their rows
# recorded no value for: on 2026-12-08 `omeganet`'s writes went from theta 0.02 (at most 0.1)
# to 0.1 (at most 1).
INNER_STEP_BEFORE = {
    name: tuple(f"model.memory.{key}={value}" for key, value in before.items())
    for name, before in PRESET_MEMORY_BEFORE.items()
}


@dataclass(frozen=True)
class Grid:
    settings: tuple[tuple[int, int], ...]  # (sequence length, key-value pairs)
    widths: tuple[int, ...]
    lrs: tuple[float, ...]
    steps: int
    batch: int


GRIDS = {
    "quick": Grid(((64, 4),), (64,), (3e-3,), steps=150, batch=32),
    "cpu": Grid(((64, 4), (128, 8)), (64, 128), (1e-3, 3e-3), steps=150, batch=32),
    "zoology": Grid(
        ((64, 4), (128, 8), (256, 16), (512, 64)),
        (64, 128, 256),
        (1e-4, 4.6e-4, 2.2e-3, 1e-2),
        steps=2000,
        batch=64,
    ),
}


def state_size(model: torch.nn.Module, seq_len: int) -> int:
    """Floats of state one sequence of ``seq_len`` tokens leaves in ``model`` (the formula
    in the module docstring): attention keys and values kept, memory weights (and momentum)."""
    total = 0
    for module in model.modules():
        if isinstance(module, NeuralMemory):
            weights = sum(w.numel() for w in module.initial_weights.values())  # H x per head
            total += weights * (2 if module.config.momentum_max > 0 else 1)
        elif isinstance(module, Attention):
            rule, kept = module.rule, seq_len
            for limit in (rule.window, rule.segment):
                kept = min(kept, limit) if limit is not None else kept
            total += 2 * module.to_qkv.in_features * kept
    return total


@torch.no_grad()
def held_out_accuracy(model: torch.nn.Module, seq_len: int, pairs: int, samples: int) -> float:
    """Accuracy over the queries of ``samples`` held-out MQAR sequences."""
    model.eval()
    correct = labelled = 0
    for start in range(0, samples, EVAL_ROWS):
        rows = min(EVAL_ROWS, samples - start)
        batch = mqar_batch(rows, seq_len, pairs, VOCAB, seed=TEST_SEED + 2 * start)
        logits, _ = model(batch.input_ids)
        hits, count = labelled_accuracy(logits, batch.labels)
        correct, labelled = correct + hits, labelled + count
    return correct / labelled


def run_settings(args: argparse.Namespace, model: str, width: int, seq_len: int, pairs: int,
                 lr: float, steps: int, batch: int, out: str) -> list[str]:  # fmt: skip
    settings = {
        "model.overrides": "{}",  # the preset's model fields out: the registered defaults
        "model.name": model, "model.dim": width, "model.depth": 2,
        "model.num_heads": max(1, width // 64), "model.vocab_size": VOCAB,
        "model.window": args.window, "model.num_persistent": 0,
        "data.source": "task:mqar", "data.task_args.vocab_size": VOCAB,
        "data.task_args.num_pairs": pairs, "train.seq_len": seq_len,
        "train.batch_size": batch, "train.steps": steps, "train.seed": args.seed,
        "optim.lr": lr, "optim.warmup_steps": max(1, steps // 10),
        "train.eval_every": 0, "train.checkpoint_every": 0, "train.log_every": max(1, steps // 4),
        "train.eval_tokens": 4 * batch * seq_len, "train.threads": 1,
        "train.progress": "false", "train.out_dir": out,
    }  # fmt: skip
    overrides = [f"{k}={v}" for k, v in settings.items()] + list(args.set)
    config = build_config("debug", overrides=overrides)
    if config.model.build().memory.chunk_size > CHUNK:
        overrides.insert(len(settings), f"model.chunk_size={CHUNK}")
    return overrides


def run_one(args: argparse.Namespace, key: dict) -> dict:
    model, width, lr = key["model"], key["width"], key["lr"]
    seq_len, pairs, steps, batch = key["seq_len"], key["pairs"], key["steps"], key["batch"]
    with tempfile.TemporaryDirectory() as scratch:
        overrides = run_settings(args, model, width, seq_len, pairs, lr, steps, batch, scratch)
        config = build_config("debug", overrides=overrides)
        start = time.time()
        trainer = Trainer(config, force=True)  # the scratch directory is this run's own
        result = trainer.run()
        if result.stopped_by is not None:  # a signal cut the run short: record nothing
            raise SystemExit(f"{model} width {width} lr {lr} stopped by {result.stopped_by}")
        accuracy = held_out_accuracy(trainer.model, seq_len, pairs, args.samples)
        net = trainer.model
    memory = any(isinstance(m, NeuralMemory) for m in net.modules())
    return {
        **key,
        "params": sum(p.numel() for p in net.parameters()),
        "state": state_size(net, seq_len),
        "chunk": net.config.memory.chunk_size if memory else None,
        "loss": round(list(result.losses.values())[-1], 4) if result.losses else None,
        "val_accuracy": round(result.eval.get("val_accuracy", float("nan")), 4),
        "accuracy": round(accuracy, 4), "samples": args.samples,
        "seconds": round(time.time() - start, 1),
    }  # fmt: skip


def label_of(row: dict) -> str:
    """The model's name, with the settings a ``--set`` changed (their last dotted part)."""
    changed = [o.split("=", 1) for o in row.get("overrides", [])]
    extra = [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in changed]
    scale = row.get("output_init")
    if scale is not None and scale != last_weight_scale(row["model"], row.get("overrides", [])):
        extra.append(f"output_init={scale:g}")  # drawn at an older default
    step = row.get("inner_step")
    if step is not None and step != inner_step(row["model"], row.get("overrides", [])):
        named = {key for key, _ in changed}  # an older preset's, where no --set gave them
        extra += [
            f"{key}={value:g}"
            for key, value in zip(("init_lr", "lr_max"), step)
            if f"model.memory.{key}" not in named
        ]
    return " ".join([row["model"], *extra])


def group_of(row: dict) -> tuple:
    """What the learning-rate sweep varies inside: every key field but the lr."""
    return tuple(json.dumps(row.get(k)) for k in KEY_FIELDS if k != "lr")


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (grid, setting, model, width, seed, budget): the run whose validation accuracy
    is highest (ties: the lower final training loss)."""
    best: dict[tuple, dict] = {}
    for row in rows:
        rank = (row["val_accuracy"], -(row["loss"] or 0.0))
        kept = best.get(group_of(row))
        if kept is None or rank > (kept["val_accuracy"], -(kept["loss"] or 0.0)):
            best[group_of(row)] = row
    return sorted(best.values(), key=lambda r: (r["seq_len"], label_of(r), r["width"]))


def print_table(rows: list[dict]) -> None:
    """Markdown: the best run per group, with every learning rate's test accuracy."""
    print("| L | pairs | model | width | state (floats) | best lr | steps x batch | seed "
          "| val acc | test acc | test acc per lr |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in best_rows(rows):
        same = sorted((r["lr"], r["accuracy"]) for r in rows if group_of(r) == group_of(row))
        tried = ", ".join(f"{lr:g}: {accuracy:.3f}" for lr, accuracy in same)
        print(f"| {row['seq_len']} | {row['pairs']} | {label_of(row)} | {row['width']} "
              f"| {row['state']:,} | {row['lr']:g} | {row['steps']} x {row['batch']} "
              f"| {row['seed']} | {row['val_accuracy']:.3f} | {row['accuracy']:.3f} "
              f"| {tried} |")  # fmt: skip


def plot(rows: list[dict], path: Path) -> None:
    """Best accuracy against state size, one line per model, one panel per (L, pairs, budget)."""
    try:
        import matplotlib
    except ImportError as err:
        raise SystemExit("--plot needs matplotlib (pip install 'titans-atlas[eval]')") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = best_rows(rows)
    models = sorted({label_of(r) for r in chosen})
    palette = plt.get_cmap("tab20").colors  # one colour per model (variants included)
    colours = {model: palette[i % len(palette)] for i, model in enumerate(models)}
    settings = sorted({(r["seq_len"], r["pairs"], r["steps"], r["batch"]) for r in chosen})
    size = (4.5 * len(settings), 3.8 + 0.25 * len(models))  # room for the legend below
    figure, axes = plt.subplots(1, len(settings), figsize=size, squeeze=False, sharey=True)
    for axis, panel in zip(axes[0], settings, strict=True):
        here = [r for r in chosen if (r["seq_len"], r["pairs"], r["steps"], r["batch"]) == panel]
        for model in sorted({label_of(r) for r in here}):
            points = sorted((r["state"], 100 * r["accuracy"]) for r in here if label_of(r) == model)
            axis.plot(*zip(*points), marker="o", label=model, color=colours[model])
        length, pairs, steps, batch = panel
        axis.set_title(f"L={length}, {pairs} pairs, {steps} steps x {batch}", fontsize=9)
        axis.set_xscale("log")
        axis.set_xlabel("state size (floats per sequence)")
        axis.set_ylim(-3, 103)
    axes[0][0].set_ylabel("MQAR accuracy (%)")
    handles = [plt.Line2D([], [], color=colours[m], marker="o", label=m) for m in models]
    figure.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.06 * (1 + len(models) // 3), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def numbers(text: str | None, kind: type) -> tuple | None:
    return None if text is None else tuple(kind(part) for part in text.split(","))


def grid_of(args: argparse.Namespace) -> Grid:
    grid = GRIDS[args.grid]
    settings = None
    if args.settings is not None:
        settings = tuple(tuple(int(x) for x in s.split(":")) for s in args.settings.split(","))
        if any(len(s) != 2 for s in settings):
            raise SystemExit(f"--settings takes LENGTH:PAIRS,..., got {args.settings!r}")
    changes = {
        "settings": settings,
        "widths": numbers(args.widths, int),
        "lrs": numbers(args.lrs, float),
        "steps": args.steps,
        "batch": args.batch,
    }
    return replace(grid, **{k: v for k, v in changes.items() if v is not None})


def last_weight_scale(model: str, overrides: list[str], saved_before: bool = False):
    """The scale an MLP memory's last weight is drawn at (``output_init``), or None for a model
    without one, as ``--set`` ``overrides`` give it. Part of a run's key: the layer's default
    went from 1 to 0.5 on 2026-12-07, and rows saved before record no value
    (``saved_before``: they drew at 1 unless their overrides said otherwise)."""
    return _last_weight_scale(model, tuple(overrides), saved_before)


@functools.cache  # a config build per call; the table asks again for every row it sorts
def _last_weight_scale(model: str, overrides: tuple[str, ...], saved_before: bool):
    if model in NO_MEMORY:
        return None
    config = build_config("debug", overrides=["model.overrides={}", f"model.name={model}",
                                              *overrides]).model.build()  # fmt: skip
    if config.memory.model == "linear":
        return None
    explicit = any(o.startswith("model.memory.output_init=") for o in overrides)
    return 1.0 if saved_before and not explicit else config.memory.output_init


def inner_step(model: str, overrides: list[str], saved_before: bool = False) -> list | None:
    """The memory's starting inner step and its bound, ``[init_lr, lr_max]``, or None for a
    model without a memory, as ``--set`` ``overrides`` give them. Part of a run's key: a
    preset's values may move (``INNER_STEP_BEFORE``), and rows saved before record none
    (``saved_before``: the earlier values, unless their overrides said otherwise)."""
    step = _inner_step(model, tuple(overrides), saved_before)
    return None if step is None else list(step)  # a fresh list: the cache keeps the tuple


@functools.cache
def _inner_step(model: str, overrides: tuple[str, ...], saved_before: bool):
    if model in NO_MEMORY:
        return None
    before = INNER_STEP_BEFORE.get(model, ()) if saved_before else ()
    config = build_config("debug", overrides=["model.overrides={}", f"model.name={model}",
                                              *before, *overrides]).model.build()  # fmt: skip
    return (config.memory.init_lr, config.memory.lr_max)


def planned(args: argparse.Namespace, grid: Grid) -> list[dict]:
    """The runs of ``grid``, each as its ``KEY_FIELDS``: per setting, model, width, lr."""
    return [
        {
            "seq_len": seq_len,
            "pairs": pairs,
            "model": model,
            "width": width,
            "lr": lr,
            "seed": args.seed,
            "steps": grid.steps,
            "batch": grid.batch,
            "window": args.window,
            "overrides": list(args.set),
            "output_init": last_weight_scale(model, list(args.set)),
            "inner_step": inner_step(model, list(args.set)),
        }
        for seq_len, pairs in grid.settings
        for model in args.models.split(",")
        for width in grid.widths
        for lr in grid.lrs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="cpu")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated names")
    parser.add_argument("--settings", help="LENGTH:PAIRS,... (e.g. 64:4,128:8)")
    parser.add_argument("--widths", help="comma-separated model widths")
    parser.add_argument("--lrs", help="comma-separated learning rates")
    parser.add_argument("--steps", type=int, help="training steps per run")
    parser.add_argument("--batch", type=int, help="sequences per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=16, help="attention window (SWA, hybrids)")
    parser.add_argument("--samples", type=int, default=512, help="held-out test sequences")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default="research/results/mqar.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table, train nothing")
    parser.add_argument("--plot", action="store_true", help="write --plot-out (matplotlib)")
    parser.add_argument("--plot-out", default="docs/results/mqar.png")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    for row in rows:
        if "output_init" not in row:
            row["output_init"] = last_weight_scale(row["model"], row["overrides"], True)
        if "inner_step" not in row:
            row["inner_step"] = inner_step(row["model"], row["overrides"], True)
    if not args.table:
        done = {json.dumps({k: r[k] for k in KEY_FIELDS}, sort_keys=True) for r in rows}
        for key in planned(args, grid_of(args)):
            if json.dumps(key, sort_keys=True) in done:
                continue
            row = {"grid": args.grid, **run_one(args, key)}
            print(json.dumps(row), flush=True)
            with out.open("a") as file:
                file.write(json.dumps(row) + "\n")
            rows.append(row)
    print_table(rows)
    if args.plot:
        plot(rows, Path(args.plot_out))


if __name__ == "__main__":
    main()
