"""``titans generate``: continue a prompt with a trained model, printing text as it decodes.

    titans generate --checkpoint runs/quickstart --prompt "HAMLET:" --max-new-tokens 200
    titans generate --checkpoint runs/quickstart --interactive --save-state chat.safetensors
    titans generate --checkpoint runs/quickstart --load-state chat.safetensors --prompt "..."

``--checkpoint`` takes a model directory, a training checkpoint or a run directory (its
latest checkpoint; ``--best`` for the best one). In interactive mode every line you type is
read into the same stream, so the memory keeps what it saw across turns; ``--save-state`` /
``--load-state`` keep that stream in a file (a "memory session": safetensors + JSON, no
pickle). ``--quantize int8`` runs the Linear layers as dynamic int8 on CPU.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import torch
from torch import nn

from ..compiling import DECODE_PAYS_AFTER_STEPS, DecodeStep
from ..generation import Sampler, SamplingConfig, compiled_decode_step, prefill
from ..io import CheckpointError, load_model
from ..io.state import load_state, save_state
from ..io.training import CHECKPOINTS, resolve_model_dir
from ..models.backbone import LanguageModel, ModelState
from ..tokenizers import Tokenizer, load_model_tokenizer
from ..validation import (
    MAX_SEED,
    check_device,
    check_int,
    check_writable_file,
    int_at_least,
    read_text_file,
)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="generate text from a trained model")
    parser.add_argument("--checkpoint", required=True, help="model / checkpoint / run directory")
    parser.add_argument("--best", action="store_true", help="a run directory's best checkpoint")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="text to continue")
    source.add_argument("--prompt-file", help="file whose text to continue")
    parser.add_argument("--interactive", action="store_true", help="read prompts from stdin")
    parser.add_argument(
        "--max-new-tokens", type=int_at_least(0), default=200,
        help="tokens to sample after each prompt (0: only read the prompt into the state)",
    )  # fmt: skip
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int_at_least(1))
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--min-p", type=float)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument(
        "--compile", choices=("auto", "true", "false"), default="auto",
        help=f"compile the decode step (auto: after {DECODE_PAYS_AFTER_STEPS:,} eager steps)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int_at_least(0, MAX_SEED), help="sampling seed (default: random)"
    )
    parser.add_argument("--load-state", help="continue the stream saved in this file")
    parser.add_argument("--save-state", help="save the stream state here at the end")
    parser.add_argument("--quantize", choices=["none", "int8"], default="none")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--backend", choices=["torch", "mlx"], default="torch",
        help="mlx: run the model with MLX (extra [mlx]); sampling options are the same",
    )  # fmt: skip
    parser.set_defaults(func=run_generate)


def quantize_int8(model: LanguageModel) -> nn.Module:
    """Dynamic int8 Linear layers (weights int8, activations quantised per call), CPU only.
    MAC reads its memory's query projection weight directly, so that one stays fp32."""
    from torch.ao.quantization import quantize_dynamic

    keep = {
        f"{n}.memory.to_qkv" for n, m in model.named_modules() if type(m).__name__ == "MACBlock"
    }
    names = {n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in keep}
    with warnings.catch_warnings():  # torch.ao's deprecation notice (torchao is its successor)
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, names, dtype=torch.qint8)


class TextPrinter:
    """Prints the text of a growing token sequence as it grows, holding back a cut multi-byte
    character until it is complete."""

    def __init__(self, tokenizer: Tokenizer, out: TextIO) -> None:
        self.tokenizer, self.out, self.ids, self.shown = tokenizer, out, [], 0

    def add(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        ready = len(text.rstrip("\ufffd"))
        if ready > self.shown:
            self.out.write(text[self.shown : ready])
            self.out.flush()
            self.shown = ready

    def finish(self) -> None:
        text = self.tokenizer.decode(self.ids)
        self.out.write(text[self.shown :])
        self.out.flush()


@torch.no_grad()
def stream_generate(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompt_ids: list[int],
    state: ModelState | None,
    max_new_tokens: int,
    sampling: SamplingConfig,
    seed: int | None,
    out: TextIO,
    device: str = "cpu",
    step: Callable | None = None,
) -> tuple[ModelState, list[int]]:
    """Read ``prompt_ids`` into the stream, then sample and print up to ``max_new_tokens``
    tokens; every sampled token is read back, so the returned state holds the whole turn.
    ``step(token [1, 1], state)`` decodes one token (default: the model's forward; the CLI
    passes a ``DecodeStep`` that compiles when it pays)."""
    if not prompt_ids:
        raise ValueError("the prompt is empty: give --prompt (or a line) some text to continue")
    check_int("max_new_tokens", max_new_tokens, 0)
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    if isinstance(model, LanguageModel):
        logits, state = prefill(model, prompt, state)
    else:  # an MLX model behind the torch API (--backend mlx)
        out_logits, state = model(prompt, state, last_only=True)
        logits = out_logits[:, -1]
    sampler = Sampler(sampling, prompt, model.config.vocab_size, seed)
    printer, new = TextPrinter(tokenizer, out), []
    step = model if step is None else step
    for _ in range(max_new_tokens):
        token = sampler(logits)  # [1]
        new.append(int(token))
        printer.add(int(token))
        out_logits, state = step(token[:, None], state)
        logits = out_logits[:, -1]
        if tokenizer.eos_id is not None and int(token) == tokenizer.eos_id:
            break
    printer.finish()
    return state, new


def _check_save_target(args: argparse.Namespace) -> None:
    """``--save-state`` may overwrite a state file (a session saved back where it was loaded
    from), never the model it runs, a checkpoint or the prompt it reads."""
    target = Path(args.save_state).resolve()
    model_dir = resolve_model_dir(args.checkpoint, "best" if args.best else "latest").resolve()
    protected = [(model_dir, "the model directory")]
    if model_dir.parent.parent.name == CHECKPOINTS:  # RUN/checkpoints/step_N/model
        protected.append((model_dir.parent.parent, "the run's checkpoints"))
    for folder, what in protected:
        if target == folder or folder in target.parents:
            raise ValueError(f"--save-state {args.save_state} is inside {what} ({folder})")
    if args.prompt_file and Path(args.prompt_file).resolve() == target:
        raise ValueError(f"--save-state {args.save_state} is the --prompt-file it reads")


def _load(args: argparse.Namespace) -> tuple[LanguageModel, Tokenizer, ModelState | None]:
    directory = resolve_model_dir(args.checkpoint, "best" if args.best else "latest")
    if args.backend == "mlx":
        model = _load_mlx(directory, args)
    else:
        model = load_model(directory, device=args.device).eval()
    tokenizer = load_model_tokenizer(directory, model.config.vocab_size)
    state = None
    if args.load_state:
        state, meta = load_state(args.load_state, device=args.device)
        if not isinstance(state, ModelState) or meta.get("model") != model.config.name:
            raise ValueError(
                f"{args.load_state} holds a state for {meta.get('model')!r}, "
                f"not {model.config.name!r}"
            )
    if args.quantize == "int8":
        if args.device != "cpu":
            raise ValueError("--quantize int8 is a CPU inference option")
        model = quantize_int8(model)
    return model, tokenizer, state


def _load_mlx(directory: Path, args: argparse.Namespace):
    """The checkpoint in MLX behind the torch API; the options that are torch-only refused."""
    torch_only = {
        "--load-state": args.load_state, "--save-state": args.save_state,
        "--quantize int8": args.quantize == "int8", f"--device {args.device}": args.device != "cpu",
    }  # fmt: skip
    given = [name for name, value in torch_only.items() if value]
    if given:
        raise ValueError(f"--backend mlx does not take {', '.join(given)} (torch only)")
    try:
        from ..mlx.torch_bridge import load_for_torch
    except ImportError as err:
        raise ValueError(
            f"--backend mlx needs MLX: pip install 'titans-atlas[mlx]' ({err})"
        ) from err
    return load_for_torch(directory)


def run_generate(args: argparse.Namespace) -> int:
    try:
        # the arguments first: a refused command loads nothing and writes nothing
        if args.backend == "torch":
            check_device("--device", args.device)
        if args.save_state:
            check_writable_file("--save-state", args.save_state)
            _check_save_target(args)
        sampling = SamplingConfig(
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
            repetition_penalty=args.repetition_penalty, greedy=args.greedy,
        )  # fmt: skip
        text = _prompt(args)
        model, tokenizer, state = _load(args)
        step = _decode_step(model, args)
        if args.interactive:
            state = _interactive(model, tokenizer, state, sampling, args, step)
        else:
            state, _ = stream_generate(
                model, tokenizer, tokenizer.encode(text), state, args.max_new_tokens, sampling,
                args.seed, sys.stdout, args.device, step,
            )  # fmt: skip
            print()
        if args.save_state and state is not None:
            meta = {"model": model.config.name, "position": str(state.position)}
            save_state(state, args.save_state, meta)
            print(
                f"stream state ({state.position} tokens) saved to {args.save_state}",
                file=sys.stderr,
            )
    except (ValueError, CheckpointError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _prompt(args: argparse.Namespace) -> str | None:
    """The prompt's text (None in interactive mode, which reads prompts from stdin)."""
    if args.interactive:
        if args.prompt is not None or args.prompt_file:
            raise ValueError("--interactive reads its prompts from stdin: leave out --prompt")
        return None
    if args.prompt_file:
        return read_text_file(args.prompt_file, "--prompt-file")
    if args.prompt is None:
        raise ValueError("give --prompt, --prompt-file or --interactive")
    return args.prompt


def _decode_step(model, args: argparse.Namespace) -> DecodeStep:
    """The one-token step for every turn (so "auto" counts eager time across turns); an MLX
    model behind the torch API decodes eager."""
    setting = args.compile if isinstance(model, LanguageModel) else False
    return DecodeStep(model, lambda: compiled_decode_step(model), setting, args.device)


def _interactive(model, tokenizer, state, sampling, args, step) -> ModelState | None:
    """One turn per input line; the state carries every turn (prompts and replies)."""
    print("interactive: each line continues the same stream; end with Ctrl-D", file=sys.stderr)
    # A session is work: a line the tokenizer refuses is skipped, and Ctrl-C ends the session
    # as Ctrl-D does, so --save-state still writes the state of every completed turn. The
    # state is data returned per turn, so an interrupted turn leaves no trace in it.
    if hasattr(sys.stdin, "reconfigure"):  # undecodable bytes reach the tokenizer, not iteration
        sys.stdin.reconfigure(errors="surrogateescape")
    try:
        for turn, line in enumerate(sys.stdin):
            try:
                ids = tokenizer.encode(line)
            except ValueError as err:  # UnicodeEncodeError (undecodable bytes) is one too
                print(f"line {turn + 1} skipped, the stream is unchanged: {err}", file=sys.stderr)
                continue
            seed = None if args.seed is None else args.seed + turn
            state, _ = stream_generate(
                model, tokenizer, ids, state, args.max_new_tokens, sampling, seed, sys.stdout,
                args.device, step,
            )  # fmt: skip
            sys.stdout.write("\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        print("\ninterrupted: the stream keeps the turns completed before it", file=sys.stderr)
    return state
