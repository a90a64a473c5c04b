"""int8 dynamic quantisation on CPU (``titans generate --quantize int8``): decode speed and
bits per byte against fp32, for one trained checkpoint.

    python benchmarks/quantized_inference.py --checkpoint runs/quickstart
    python benchmarks/quantized_inference.py --checkpoint runs/quickstart --text book.txt

Bits per byte: the text is streamed through the model in windows of ``--window`` tokens with
the state carried (the model sees the whole text once). Decode: tokens/s of greedy
``decode_one_token`` after a 64-token prompt, median of repeats.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _harness import set_threads
from titans_atlas.cli.generate import quantize_int8
from titans_atlas.generation import Sampler, SamplingConfig, decode_one_token, prefill
from titans_atlas.io import load_model
from titans_atlas.io.training import resolve_model_dir
from titans_atlas.tokenizers import load_tokenizer, token_byte_lengths

DEFAULT_TEXT = (
    Path(__file__).resolve().parents[1] / "src" / "titans_atlas" / "texts" / "macbeth.txt"
)


@torch.no_grad()
def bits_per_byte(model, ids: torch.Tensor, byte_lengths: torch.Tensor, window: int) -> float:
    state, nats = None, 0.0
    for start in range(0, ids.shape[1] - 1, window):
        piece = ids[:, start : start + window + 1]
        logits, state = model(piece[:, :-1], state)
        nats += float(F.cross_entropy(logits.flatten(0, 1).float(), piece[0, 1:], reduction="sum"))
    return nats / math.log(2) / float(byte_lengths[ids[0, 1:]].sum())


@torch.no_grad()
def decode_tokens_per_s(model, prompt: torch.Tensor, steps: int, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        sampler = Sampler(SamplingConfig(greedy=True), prompt, model.config.vocab_size)
        logits, state = prefill(model, prompt)
        token = sampler(logits)
        start = time.perf_counter()
        for _ in range(steps):
            token, _, state = decode_one_token(model, token, state, sampler)
        times.append(time.perf_counter() - start)
    return steps / sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="model / checkpoint / run directory")
    parser.add_argument("--text", default=str(DEFAULT_TEXT))
    parser.add_argument("--tokens", type=int, default=8192, help="text tokens to score")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--decode", type=int, default=128, help="decode steps to time")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    directory = resolve_model_dir(args.checkpoint)
    tokenizer = (
        load_tokenizer(directory)
        if (directory / "tokenizer_spec.json").is_file()
        else load_tokenizer()
    )
    lengths = torch.tensor(token_byte_lengths(tokenizer), dtype=torch.float64)
    ids = torch.tensor([tokenizer.encode(Path(args.text).read_text())[: args.tokens + 1]])
    fp32 = load_model(directory).eval()
    models = {"fp32": fp32, "int8": quantize_int8(load_model(directory).eval())}
    print("| weights | bits/byte | decode tokens/s |")
    print("|---|---|---|")
    for name, model in models.items():
        bpb = bits_per_byte(model, ids, lengths, args.window)
        speed = decode_tokens_per_s(model, ids[:, :64], args.decode)
        print(f"| {name} | {bpb:.4f} | {speed:.1f} |", flush=True)


if __name__ == "__main__":
    main()
