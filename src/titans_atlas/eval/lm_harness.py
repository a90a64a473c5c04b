"""EleutherAI lm-evaluation-harness adapter: ``--model titans`` (the ``[lm-eval]`` extra).

lm-eval finds models in its own registry, so the adapter must be imported before lm-eval
runs. This module does that and forwards its command line to lm-eval:

    python -m titans_atlas.eval.lm_harness --model titans \\
        --model_args checkpoint=DIR,piece_size=2048 --tasks lambada_openai

or from Python: ``import titans_atlas.eval.lm_harness`` and then ``lm_eval.simple_evaluate(
model="titans", model_args="checkpoint=DIR", ...)``.

* ``loglikelihood``: the context is streamed once, the continuation scored from its state
  (the context's trailing spaces move into the continuation, as lm-eval's HF model does).
* ``loglikelihood_rolling``: the whole text streamed in pieces with the state carried -- no
  windows, no truncation: the memory model reads it all.
* ``generate_until``: greedy decoding until a stop string or ``max_gen_toks``.
An empty context is conditioned on the end-of-text token, or on "\\n" for tokenizers (bytes)
that have none.
"""

from __future__ import annotations

import sys

from .extras import require
from .inference import DEFAULT_PIECE, Evaluator
from .loading import load_checkpoint

_api_model = require("lm_eval.api.model", "the lm-evaluation-harness adapter", extra="lm-eval")
_registry = require("lm_eval.api.registry", "the lm-evaluation-harness adapter", extra="lm-eval")


@_registry.register_model("titans")
class TitansLM(_api_model.LM):
    """A titans-atlas model directory as an lm-eval model (batch size 1, streamed)."""

    def __init__(
        self,
        checkpoint: str | None = None,
        device: str = "cpu",
        piece_size: int = DEFAULT_PIECE,
        max_gen_toks: int = 256,
        model=None,
        tokenizer=None,
        **_unused,  # lm-eval passes batch_size / max_batch_size; we stream one sample at a time
    ) -> None:
        super().__init__()
        if model is None:
            if checkpoint is None:
                raise ValueError("the titans lm-eval model needs checkpoint=DIR")
            loaded = load_checkpoint(checkpoint, device=device)
            model, tokenizer = loaded.model, loaded.tokenizer
        if tokenizer is None:
            raise ValueError("a model given directly needs its tokenizer")
        self.tokenizer, self.max_gen_toks = tokenizer, int(max_gen_toks)
        self.evaluator = Evaluator(model, piece_size=int(piece_size), check_budget=False)
        start = [tokenizer.eos_id] if tokenizer.eos_id is not None else tokenizer.encode("\n")
        self.start_ids: list[int] = start

    def _split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tokenizer.encode(context + continuation)
        context_ids = self.tokenizer.encode(context)
        if whole[: len(context_ids)] != context_ids:  # a merge across the seam: encode apart
            return context_ids or self.start_ids, self.tokenizer.encode(continuation)
        return context_ids or self.start_ids, whole[len(context_ids) :]

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        results = []
        for request in requests:
            context_ids, continuation_ids = self._split(*request.args)
            last_logits, state = self.evaluator.prefill(context_ids)
            results.append(
                self.evaluator.continuation_logprob(last_logits, state, continuation_ids)
            )
        return results

    def loglikelihood_rolling(self, requests) -> list[float]:
        results = []
        for request in requests:
            ids = self.tokenizer.encode(request.args[0])
            last_logits, state = self.evaluator.prefill(self.start_ids)
            results.append(
                self.evaluator.continuation_logprob(last_logits, state, ids)[0] if ids else 0.0
            )
        return results

    def generate_until(self, requests) -> list[str]:
        results = []
        for request in requests:
            context, options = request.args
            options = dict(options or {})
            if options.get("do_sample") and options.get("temperature", 0) > 0:
                raise ValueError(
                    "the titans lm-eval model decodes greedily; do_sample is not supported"
                )
            stops = options.get("until") or []
            stops = [stops] if isinstance(stops, str) else list(stops)
            budget = int(options.get("max_gen_toks", self.max_gen_toks))
            results.append(self._greedy_until(context, stops, budget))
        return results

    def _greedy_until(self, context: str, stops: list[str], budget: int) -> str:
        ids = self.tokenizer.encode(context) or self.start_ids
        logits, state = self.evaluator.prefill(ids)
        generated: list[int] = []
        for _ in range(budget):
            token = int(logits.argmax())
            if token == self.tokenizer.eos_id:
                break
            generated.append(token)
            text = self.tokenizer.decode(generated)
            cut = min((text.find(s) for s in stops if s and s in text), default=-1)
            if cut >= 0:
                return text[:cut]
            next_logits, state = self.evaluator.model(
                self.evaluator.as_tensor([token]), state=state
            )
            logits = next_logits[0, -1].float()
        return self.tokenizer.decode(generated)


def main(argv: list[str] | None = None) -> None:
    """lm-eval's command line with the ``titans`` model registered."""
    cli = require("lm_eval.__main__", "the lm-evaluation-harness command line", extra="lm-eval")
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli.cli_evaluate()


if __name__ == "__main__":
    main()
