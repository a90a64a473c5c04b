"""Language modelling on books at equal parameters (issue 10 item 3; research/LOG.md).

Trains one model with the library's loop on six of the public-domain books in
``../shared/data/gutenberg`` (every file but The Jungle Book; byte-level, 512-byte training
windows, 64-byte attention window, ~530k parameters for every model), then evaluates on two
texts it never saw -- The Jungle Book, whole, and the first 256k bytes of WikiText-2's test
split -- three ways:

- ``carried``: the whole text as one stream, state carried (attention models: their window);
- ``reset``: independent windows of the 512-byte training length, fresh state each;
- ``by position``: the text cut into 4,096-byte segments, each from a fresh state; the loss
  averaged per position and binned (1-64, 65-128, ..., 2049-4096): a model that uses
  context past its attention window keeps improving after byte 64, SWA cannot.

- ``past_far``: the tokens past byte 2,048 of every 4,096-byte segment, carried from the
  segment's start against reset every 512 bytes (``gain`` = reset - carried).

The Transformer control attends to everything in its 512-byte window, so it is scored on
``reset`` (and ``past_far`` reset) and on positions up to 512 only. One JSON line per run;
``--plot`` draws them. Stream training (the memory carried across training windows) and
per-head timescales are overrides, e.g.
``--set data.mode=stream --set data.stream_tokens=16384 --set train.batch_size=16
--set train.seq_len=128 --set model.memory.timescale_ratio=256``.

    python research/experiments/books_lm.py --model lmm --seed 0
    python research/experiments/books_lm.py --model lmm --seed 0 --evaluate-only \
        --test-decay-min 1e-4
    python research/experiments/books_lm.py --plot

``--evaluate-only`` scores the finished run of the same options again instead of training it
(here with the memory's decay floor lowered from the trained 1e-3).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
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

from titans_atlas.tokenizers import ByteTokenizer
from titans_atlas.train import Trainer, build_config

DATA = Path(__file__).resolve().parents[2].parent / "shared/data"
TRAIN_GLOB = str(DATA / "gutenberg/[!j]*.txt")  # every book but jnglb10.txt (held out)
EVAL_TEXTS = {"jungle_book": (DATA / "gutenberg/jnglb10.txt", None),
              "wikitext2_test": (DATA / "wikitext-2/test.txt", 262_144)}  # fmt: skip
RESULTS = Path("docs/results/books_lm.jsonl")
TRAIN_LENGTH, PIECE, SEGMENT, FAR = 512, 512, 4096, 2048
BINS = (64, 128, 256, 512, 1024, 2048, 4096)  # upper edges of the by-position bins
# ~530k parameters each: the memory layer costs what a wider attention block does
SIZES = {"lmm": ["model.dim=128"], "mag": ["model.dim=112"], "swa": ["model.dim=144"],
         "transformer": ["model.dim=144"], "omeganet": ["model.dim=124"]}  # fmt: skip


@torch.no_grad()
def streamed_losses(model, ids: torch.Tensor) -> torch.Tensor:
    """Per-token loss ``[N, T - 1]`` of rows ``ids [N, T]``, each streamed from a fresh state
    in PIECE-token pieces with the state carried between them."""
    losses, state = [], None
    for start in range(0, ids.shape[1] - 1, PIECE):
        piece = ids[:, start : start + PIECE + 1]
        logits, state = model(piece[:, :-1], state)
        losses.append(F.cross_entropy(logits.transpose(1, 2), piece[:, 1:], reduction="none"))
    return torch.cat(losses, dim=1)


def rows(ids: torch.Tensor, length: int) -> torch.Tensor:
    """``ids [T]`` cut into independent rows of ``length + 1`` tokens (one shared)."""
    usable = (len(ids) - 1) // length * length
    return ids[: usable + 1].unfold(0, length + 1, length)  # [N, length + 1]


def evaluate(model, ids: torch.Tensor, full_attention: bool) -> dict:
    bpb = 1 / math.log(2)
    reset = torch.cat([streamed_losses(model, r) for r in rows(ids, TRAIN_LENGTH).split(64)])
    segments = streamed_losses(model, rows(ids, SEGMENT))  # [N, SEGMENT], fresh state each
    by_position = segments.mean(0)  # [SEGMENT]
    out = {"reset_bpb": round(float(reset.mean()) * bpb, 4), "by_position": []}
    # The same tokens past byte FAR of every segment, scored twice: with the state carried
    # from the segment's start, and from the fresh state of their 512-byte training row (the
    # rows tile the segments: 4,096 = 8 x 512, both cut from byte 0). The Transformer sees
    # its whole row only when reset, so it gets the reset number alone: its control value.
    reset_in_segments = reset.flatten()[: segments.numel()].view_as(segments)
    far_reset = float(reset_in_segments[:, FAR:].mean()) * bpb
    out["past_far"] = {"reset": round(far_reset, 4)}
    if not full_attention:
        far_carried = float(segments[:, FAR:].mean()) * bpb
        out["past_far"].update(carried=round(far_carried, 4),
                               gain=round(far_reset - far_carried, 4))  # fmt: skip
    low = 0
    for high in BINS:
        if full_attention and high > TRAIN_LENGTH:
            break
        out["by_position"].append(round(float(by_position[low:high].mean()) * bpb, 4))
        low = high
    if not full_attention:
        carried = streamed_losses(model, ids[None])[0]
        blocks = carried[: len(carried) // SEGMENT * SEGMENT].view(-1, SEGMENT).mean(1)
        out["carried_bpb"] = round(float(carried.mean()) * bpb, 4)
        out["carried_blocks"] = [round(float(b) * bpb, 4) for b in blocks]
    return out


def run_config(args: argparse.Namespace):
    """The quickstart preset at ~530k parameters on the training books, with the run's
    overrides; trains into ``runs/books_lm/<model>-seed<seed>`` unless ``--set
    train.out_dir=...`` says otherwise."""
    overrides = [
        f"model.name={args.model}",
        *SIZES.get(args.model, []),
        f"data.source={TRAIN_GLOB}",
        f"train.seed={args.seed}",
        f"train.steps={args.steps}",
        f"train.seq_len={TRAIN_LENGTH}",
        "train.batch_size=4",
        "train.eval_every=0",
        f"train.out_dir=runs/books_lm/{args.model}-seed{args.seed}",
        *QUIET,
        *args.set,
    ]
    if args.model == "transformer":
        overrides.append(f"model.window={TRAIN_LENGTH}")
    return build_config("quickstart", overrides=overrides)


def run(args: argparse.Namespace) -> dict:
    if not DATA.is_dir():
        raise SystemExit(f"missing {DATA}: this experiment reads the shared data folder")
    config = run_config(args)
    start = time.time()
    if args.evaluate_only:  # the training time is in that run's own record
        model, train_seconds = load_finished(Path(config.train.out_dir), args.steps), None
        steps = args.steps
    else:
        # `Trainer` is looked up here, so an experiment may swap in a subclass that starts the
        # model differently (research/experiments/start_pilot.py)
        trainer = Trainer(config)
        model, steps = trainer.model, trainer.run().step
        train_seconds = round(time.time() - start)
    model.eval()
    if args.test_decay_min is not None:
        set_decay_floor(model, args.test_decay_min)
    record = {
        "model": args.model,
        "seed": args.seed,
        "overrides": args.set + evaluation_overrides(args),
        "parameters": model.num_parameters(),
        "steps": steps,
        "tokens": steps * config.train.batch_size * config.train.seq_len,
        "train_seconds": train_seconds,
        "evaluated_only": args.evaluate_only,
    }
    for name, (path, limit) in EVAL_TEXTS.items():
        text = path.read_text(encoding="utf-8", errors="replace")
        ids = torch.tensor(ByteTokenizer().encode(text))[: limit and limit + 1]
        record[name] = evaluate(model, ids, full_attention=args.model == "transformer")
    record["seconds"] = round(time.time() - start)
    return record


def plot(path: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_records(path)
    control = {item["seed"]: item for item in runs if name(item) == "swa"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    for index, item in enumerate(runs):
        for column, text in enumerate(EVAL_TEXTS):
            curve = item[text]["by_position"]
            label = f"{name(item)} ({item['parameters'] / 1e3:.0f}k)"
            axes[0, column].plot(BINS[: len(curve)], curve, marker="o", color=f"C{index}",
                                 label=label)  # fmt: skip
            swa = control.get(item["seed"])
            if swa is not None and item is not swa:
                gap = [a - b for a, b in zip(curve, swa[text]["by_position"])]
                axes[1, column].plot(BINS[: len(gap)], gap, marker="o", color=f"C{index}",
                                     label=label)  # fmt: skip
    for column, text in enumerate(EVAL_TEXTS):
        axes[0, column].set(ylabel="bits per byte", title=f"{text}: loss by position, fresh state")
        axes[1, column].set(ylabel="minus the SWA control (bits per byte)", xscale="log",
                            xlabel="position in a 4,096-byte segment (bin upper edge)")  # fmt: skip
        for ax in axes[:, column]:
            ax.axvline(64, color="grey", linestyle=":", label="attention window (64)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(table(runs))


def name(item: dict) -> str:
    """The model with the model overrides it was trained or evaluated with (``train.*`` ones,
    such as another run directory, say nothing about the model)."""
    extra = [short_override(o) for o in item["overrides"] if not o.startswith("train.")]
    return item["model"] + (f" ({', '.join(extra)})" if extra else "")


def table(runs: list[dict]) -> str:
    """The results as a markdown table: one row per run and evaluation text."""
    lines = [
        "| model | params | text | carried bpb | reset every 512 | bpb at 1-64 | last bin "
        "| past 2,048: carried | reset | gain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for item in runs:
        for text in EVAL_TEXTS:
            scores, far = item[text], item[text].get("past_far", {})
            first, last = scores["by_position"][0], scores["by_position"][-1]
            cells = [name(item), f"{item['parameters'] / 1e3:.0f}k", text,
                     cell(scores.get("carried_bpb")), cell(scores["reset_bpb"]), cell(first),
                     cell(last), cell(far.get("carried")), cell(far.get("reset")),
                     cell(far.get("gain"))]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = experiment_parser(__doc__, RESULTS, 600)
    add_evaluation_options(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    run_or_plot(build_parser().parse_args(argv), run, plot)


if __name__ == "__main__":
    main()
