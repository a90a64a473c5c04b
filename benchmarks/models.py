"""Model-level speed (issue 12): a training step and greedy decoding for every registered
model, eager and compiled, with titans-pytorch's MAC side by side.

* train: forward + backward of the next-byte loss on ``batch x train_tokens`` (no optimizer),
  median over repeats -> tokens/s, and an estimate of the achieved fraction of the matmul
  peak (6 x parameters x tokens FLOPs; the memory's inner updates are not counted). Compiled:
  ``model.compile_blocks()`` (inductor, per block).
* decode: prefill a ``prompt_tokens`` prompt, then ``new_tokens`` greedy single-token steps
  -> tokens/s of the steps, value checks off after the prefill as ``generate`` runs them.
  Compiled: ``compiled_decode_step(model)``, warmed up first (the compile time is reported,
  not timed).
* titans-pytorch: its ``MemoryAsContextTransformer`` at the same shape, run by
  ``external/titans_pytorch_mac.py`` in its own venv (``external/setup_titans_pytorch.sh``).

    python benchmarks/models.py                  # dim 256, depth 2, window 128, bytes, fp32
    python benchmarks/models.py --quick          # smoke run at tiny sizes
    python benchmarks/models.py --models mac lmm --modes eager --memory
    python benchmarks/models.py --models mac lmm --modes eager --cases train --interleave 10
    python benchmarks/models.py --device cuda --dtype bf16 --titans-pytorch none

Results: benchmarks/results/models.json and a markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import _harness
import titans_atlas as ta
from titans_atlas.generation import compiled_decode_step

RESULTS = Path(__file__).parent / "results"
EXTERNAL = Path(__file__).parent / "external" / "titans_pytorch_mac.py"
DEFAULT_VENV_PYTHON = (
    Path(__file__).resolve().parents[2] / "venvs" / "titans-pytorch" / "bin" / "python"
)


def build(name: str, args: argparse.Namespace) -> ta.LanguageModel:
    torch.manual_seed(0)
    size = {"vocab_size": 256, "dim": args.dim, "depth": args.depth, "num_heads": args.heads}
    size |= {"window": args.window, "chunk_size": args.chunk_size}
    return ta.create_model(name, **size).to(args.device)


def autocast(args: argparse.Namespace) -> torch.autocast:
    return _harness.bf16_autocast(args.device, args.dtype)


def sync(args: argparse.Namespace) -> None:
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def train_step(name: str, args: argparse.Namespace, compiled: bool):
    """The zero-argument training step to time (module-level, so a subprocess can build it).
    Value checks off, as ``titans train`` runs its steps: on a GPU each check is a host sync
    (MAC: one per segment and layer), which costs nothing on the CPU."""
    model = build(name, args).train().set_runtime(validate=False)
    if compiled:
        model.compile_blocks()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (args.batch, args.train_tokens + 1), generator=gen).to(args.device)

    def step() -> None:
        with autocast(args):
            logits, _ = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync(args)

    return step


def measure_train(name: str, args: argparse.Namespace, compiled: bool) -> dict:
    start = time.perf_counter()
    step = train_step(name, args, compiled)
    step()  # the first call compiles
    first_s = time.perf_counter() - start
    timing = _harness.time_callable(step, warmup=1, repeats=args.repeats)
    tokens = args.batch * args.train_tokens
    params = build(name, args).num_parameters()
    row = {
        "tokens_per_s": tokens / timing.median_s,
        "step_s": timing.median_s,
        "first_call_s": first_s,
        "other_cpu_s": timing.other_cpu_s,
        "model_gflops": 6 * params * tokens / timing.median_s / 1e9,
    }
    if args.memory and args.device == "cpu":  # compiled: measured after its compiling step
        peak = _harness.peak_memory(train_step, name, args, compiled, threads=args.threads)
        row["peak_mb"] = peak["peak_bytes"] / 2**20
    return row


def compile_speedup(name: str, args: argparse.Namespace) -> dict:
    """Eager and compiled training steps alternating ``args.interleave`` times in one process
    (for ``mac``, with a titans-pytorch worker's step as the third of each round): a shared
    machine's load changes over the minutes between separate measurements, and hits every
    step of a round alike. Each step is timed on its second call in a row, so none starts
    with caches the step before it (another model, or the other process) has evicted.
    Returns the medians of the per-round ratios."""
    torch._dynamo.reset()
    steps = {"eager": train_step(name, args, False)}
    start = time.perf_counter()
    steps["compiled"] = train_step(name, args, True)
    steps["compiled"]()  # the first call compiles
    compile_s = time.perf_counter() - start
    worker = titans_pytorch_worker(args) if name == "mac" else None
    try:
        if worker is not None:
            steps["titans_pytorch"] = lambda: _worker_step(worker)
        rounds = [
            {label: _warm_timed(step) for label, step in steps.items()}
            for _ in range(args.interleave)
        ]
    finally:
        if worker is not None:
            worker.stdin.close()
            worker.wait(timeout=60)
    pairs = [("compiled", "eager")]
    pairs += [(ours, "titans_pytorch") for ours in ("eager", "compiled") if worker is not None]
    result = {"rounds_s": rounds, "compile_s": compile_s}
    for one, other in pairs:  # one's tokens/s over other's, per round
        ratios = [r[other] / r[one] for r in rounds]
        result[f"{one}_over_{other}"] = {"median": statistics.median(ratios), "ratios": ratios}
    return result


def _warm_timed(step) -> float:
    """Seconds of the second of two calls of ``step`` (a worker's step reports its own)."""
    step()
    start = time.perf_counter()
    seconds = step()
    return seconds if seconds is not None else time.perf_counter() - start


def titans_pytorch_worker(args: argparse.Namespace) -> subprocess.Popen | None:
    """The titans-pytorch MAC's training step in its own venv, served one step per line;
    None (with a message) when its venv is not there or the worker does not start."""
    command = _titans_pytorch_command(args)
    if command is None:
        return None
    worker = subprocess.Popen(
        [*command, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    if worker.stdout.readline().strip() != "ready":
        worker.kill()
        worker.wait()
        print("titans-pytorch worker failed to start (its stderr is above)")
        return None
    return worker


def _worker_step(worker: subprocess.Popen) -> float:
    worker.stdin.write("step\n")
    worker.stdin.flush()
    line = worker.stdout.readline()
    if not line:
        raise RuntimeError(f"titans-pytorch worker died (exit code {worker.poll()})")
    return float(line)


@torch.no_grad()
def measure_decode(name: str, args: argparse.Namespace, compiled: bool) -> dict:
    model = build(name, args).eval()
    gen = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 256, (1, args.prompt_tokens), generator=gen).to(args.device)
    with autocast(args):
        logits, prefilled = model(prompt, last_only=True)
    step = compiled_decode_step(model) if compiled else model
    first = logits[:, -1].argmax(-1, keepdim=True)

    def decode(count: int):
        token, state = first, prefilled
        with autocast(args), _harness.as_generate_decodes():
            for _ in range(count):
                out, state = step(token, state)
                token = out[:, -1].argmax(-1, keepdim=True)
        sync(args)
        return state

    start = time.perf_counter()
    decode(args.warmup_tokens)  # compiles the step's few variants (chunk and segment phases)
    compile_s = time.perf_counter() - start
    timing = _harness.time_callable(lambda: decode(args.new_tokens), warmup=0, repeats=3)
    return {
        "tokens_per_s": args.new_tokens / timing.median_s,
        "ms_per_token": 1e3 * timing.median_s / args.new_tokens,
        "warmup_s": compile_s,
        "other_cpu_s": timing.other_cpu_s,
    }


def titans_pytorch(args: argparse.Namespace) -> dict | None:
    """Run the titans-pytorch MAC at the same shape in its own venv; None if unavailable."""
    command = _titans_pytorch_command(args)
    if command is None:
        return None
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        print(f"titans-pytorch failed:\n{done.stderr[-2000:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _titans_pytorch_command(args: argparse.Namespace) -> list[str] | None:
    """The command line of ``external/titans_pytorch_mac.py`` at this run's shape, or None
    (with a message) when its venv is not there."""
    python = Path(args.titans_pytorch) if args.titans_pytorch != "auto" else DEFAULT_VENV_PYTHON
    if args.titans_pytorch == "none" or not python.exists():
        print(f"titans-pytorch: skipped (no interpreter at {python}; see external/)")
        return None
    command = [str(python), str(EXTERNAL), "--dim", str(args.dim), "--depth", str(args.depth)]
    command += ["--heads", str(args.heads)]
    command += ["--segment", str(args.window), "--batch", str(args.batch)]
    command += ["--train-tokens", str(args.train_tokens), "--prompt-tokens"]
    command += [str(args.prompt_tokens), "--new-tokens", str(args.new_tokens)]
    command += ["--repeats", str(args.repeats), "--threads", str(args.threads)]
    command += ["--device", args.device, "--dtype", args.dtype]
    command += ["--memory"] if args.memory else []
    return command


INTERLEAVED_LABELS = {
    "compiled_over_eager": "compiled / eager",
    "eager_over_titans_pytorch": "eager / titans-pytorch eager",
    "compiled_over_titans_pytorch": "compiled / titans-pytorch eager",
}


def markdown(report: dict) -> str:
    head = "| model | mode | train tokens/s | train peak MB | decode tokens/s | ms/token |"
    lines = [head, "|---|---|---|---|---|---|"]
    rows = [row for row in report["rows"] if "train" in row or "decode" in row]
    pairs = [row for row in report["rows"] if "train_interleaved" in row]
    if report.get("titans_pytorch"):
        rows.append({"model": "titans-pytorch MAC", "mode": "eager", **report["titans_pytorch"]})
    for row in rows:
        train, decode = row.get("train", {}), row.get("decode", {})
        cells = [row["model"], row["mode"], f"{train.get('tokens_per_s', math.nan):,.0f}"]
        cells += [f"{train['peak_mb']:.1f}" if "peak_mb" in train else "-"]
        cells += [f"{decode['tokens_per_s']:,.1f}" if decode else "-"]
        cells += [f"{decode['ms_per_token']:.2f}" if decode else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    for row in pairs:
        pair = row["train_interleaved"]
        lines.append(f"\n{row['model']} training steps interleaved (medians of per-round ratios):")
        for key, label in INTERLEAVED_LABELS.items():
            if key in pair:
                ratios = pair[key]["ratios"]
                lines.append(
                    f"- {label}: {pair[key]['median']:.2f}x "
                    f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)"
                )
        lines.append(f"- compile time {pair['compile_s']:.0f} s")
    ours = {r["mode"]: r for r in rows if r["model"] == "mac"}
    theirs = report.get("titans_pytorch")
    if theirs and ours:
        for mode, row in ours.items():
            ratios = [
                f"{case} {row[case]['tokens_per_s'] / theirs[case]['tokens_per_s']:.2f}x"
                for case in ("train", "decode")
                if case in row and case in theirs  # --cases may leave one out
            ]
            lines.append(f"\nmac {mode} vs titans-pytorch MAC: {', '.join(ratios)}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    rows = []
    for name in args.models:
        for mode in args.modes:
            compiled = mode == "compiled"
            torch._dynamo.reset()
            row = {"model": name, "mode": mode}
            if "train" in args.cases:
                row["train"] = measure_train(name, args, compiled)
            if "decode" in args.cases:
                # A fresh dynamo for decoding, as `titans generate` starts: what the training
                # compile left (its graphs, the shapes it saw change) made compiled decoding
                # 1.5x slower in the same process (231.9 vs 351.3 tokens/s, docs/benchmarks.md).
                torch._dynamo.reset()
                row["decode"] = measure_decode(name, args, compiled)
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.interleave:
            pair = compile_speedup(name, args)
            rows.append({"model": name, "mode": "compiled/eager", "train_interleaved": pair})
            print(json.dumps(rows[-1]), flush=True)
    report = {"rows": rows, "titans_pytorch": titans_pytorch(args)}
    if report["titans_pytorch"]:
        print(json.dumps({"titans_pytorch": report["titans_pytorch"]}), flush=True)
    peak = _harness.matmul_peak_gflops(threads=args.threads) if args.device == "cpu" else None
    report |= {"matmul_peak_gflops": peak, "torch": torch.__version__}
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report |= {"machine": platform.processor() or platform.machine(), "args": settings}
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=ta.list_models())
    p.add_argument(
        "--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"]
    )
    p.add_argument("--cases", nargs="+", default=["train", "decode"], choices=["train", "decode"])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--window", type=int, default=128, help="SWA window / MAC segment")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--train-tokens", type=int, default=1024)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--warmup-tokens", type=int, help="default: one chunk/segment period + 2")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--memory", action="store_true", help="peak RSS growth of a training step")
    p.add_argument(
        "--interleave",
        type=int,
        default=0,
        help="also alternate eager/compiled train steps N times (mac: and titans-pytorch's)",
    )
    p.add_argument("--titans-pytorch", default="auto", help="its venv's python, 'auto' or 'none'")
    p.add_argument("--quick", action="store_true", help="smoke run at tiny sizes")
    p.add_argument("--out", type=Path, default=RESULTS / "models.json")
    args = p.parse_args(argv)
    if args.quick:
        args.dim, args.depth, args.heads, args.window, args.chunk_size = 32, 1, 2, 16, 8
        args.train_tokens, args.prompt_tokens, args.new_tokens, args.repeats = 64, 16, 8, 2
    if args.warmup_tokens is None:  # every chunk and segment phase the timed steps will see
        args.warmup_tokens = math.lcm(args.chunk_size, args.window) + 2
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    _harness.set_threads(args.threads)
    report = run(args)
    table = markdown(report)
    print("\n" + table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report | {"table": table}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
