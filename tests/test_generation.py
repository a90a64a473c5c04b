"""Generation: greedy decoding equals the argmax of one full forward, seeded sampling, the
HF-style logits processors, stop tokens, argument checks, purity.

Models run in float64 so that near-ties in the tiny untrained models cannot flip an argmax.
"""

from __future__ import annotations

import math

import pytest
import torch

import titans_atlas as ta
from titans_atlas.generation import (
    Sampler,
    SamplingConfig,
    apply_min_p,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
    decode_one_token,
    generate,
    prefill,
    process_logits,
)

VOCAB, PROMPT_LEN, NEW = 50, 5, 20  # 25 tokens: crosses MAC segments (8) and chunks (4)


def tiny_model(name: str) -> ta.LanguageModel:
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=VOCAB, dim=32, depth=2, num_heads=2, window=8, chunk_size=4
    )
    return model.double()


@pytest.fixture(scope="module")
def lmm() -> ta.LanguageModel:
    return tiny_model("lmm")


def prompt(batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, PROMPT_LEN), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", ["lmm", "mac", "mag", "mal", "atlas", "swa", "transformer"])
def test_greedy_is_argmax_of_full_forward(name):
    model = tiny_model(name)
    out = generate(model, prompt(), NEW, greedy=True)
    assert out.shape == (2, PROMPT_LEN + NEW) and out.dtype == torch.int64
    logits, _ = model(out)
    expected = logits[:, PROMPT_LEN - 1 : -1].argmax(dim=-1)  # [B, NEW]
    assert torch.equal(out[:, PROMPT_LEN:], expected)
    assert torch.equal(generate(model, prompt(), NEW, temperature=0.0), out)


@pytest.mark.parametrize("name", ["mac", "atlas"])
def test_decode_scores_equal_full_forward(name):
    model = tiny_model(name)
    last, state = prefill(model, prompt())
    sampler = Sampler(SamplingConfig(greedy=True), prompt(), VOCAB)
    token, scores = sampler(last), [last]
    for _ in range(NEW - 1):
        token, logits, state = decode_one_token(model, token, state, sampler)
        scores.append(logits)
    assert state.position == PROMPT_LEN + NEW - 1
    out = torch.cat([prompt(), torch.stack([s.argmax(-1) for s in scores], dim=1)], dim=1)
    full, _ = model(out)
    torch.testing.assert_close(torch.stack(scores, 1), full[:, PROMPT_LEN - 1 : -1])


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(lmm):
    rng = torch.get_rng_state()
    first = generate(lmm, prompt(), NEW, seed=123, top_k=20, top_p=0.95)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(generate(lmm, prompt(), NEW, seed=123, top_k=20, top_p=0.95), first)
    assert not torch.equal(generate(lmm, prompt(), NEW, seed=124, top_k=20, top_p=0.95), first)
    generate(lmm, prompt(), NEW)  # seed=None: random, still without the global RNG
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize(
    "kwargs",
    [{"top_k": 1}, {"top_p": 1e-9}, {"min_p": 1 - 1e-9}, {"top_k": 1, "temperature": 5.0}],
    ids=["top_k=1", "top_p~0", "min_p~1", "top_k=1-hot"],
)
def test_filters_that_keep_one_token_equal_greedy(lmm, kwargs):
    greedy = generate(lmm, prompt(), NEW, greedy=True)
    assert torch.equal(generate(lmm, prompt(), NEW, seed=7, **kwargs), greedy)


def test_repetition_penalty_divides_positive_multiplies_negative():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -4.0]])
    seen = torch.tensor([[True, True, False, False, True]])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, 3.0, -8.0]]))
    assert apply_repetition_penalty(logits, seen, 1.0) is logits


def test_greedy_with_repetition_penalty_counts_prompt_and_generated_tokens(lmm):
    penalty = 3.0
    out = generate(lmm, prompt(), NEW, greedy=True, repetition_penalty=penalty)
    assert not torch.equal(out, generate(lmm, prompt(), NEW, greedy=True))
    logits, _ = lmm(out)
    for t in range(PROMPT_LEN, PROMPT_LEN + NEW):
        seen = torch.zeros(2, VOCAB, dtype=torch.bool).scatter_(1, out[:, :t], True)
        expected = apply_repetition_penalty(logits[:, t - 1], seen, penalty).argmax(-1)
        assert torch.equal(out[:, t], expected), f"step {t}"


def test_top_k_keeps_k_largest_and_ties():
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    kept = apply_top_k(logits, 2).isfinite()
    assert kept.tolist() == [[False, True, True, True, False]]  # tie with the 2nd kept
    assert apply_top_k(logits, 1).isfinite().tolist() == [[False, True, False, False, False]]
    assert apply_top_k(logits, 99).isfinite().all()


@pytest.mark.parametrize(("p", "kept"), [(0.4, 1), (0.75, 2), (0.85, 3), (0.99, 4), (1.0, 4)])
def test_top_p_keeps_smallest_set_reaching_p(p, kept):
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5, 0.3, 0.15, 0.05
    out = apply_top_p(probs.log()[None], p)
    order = [1, 3, 0, 2]
    assert out.isfinite()[0, order].tolist() == [True] * kept + [False] * (4 - kept)


def test_min_p_drops_tokens_below_fraction_of_top():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert apply_min_p(logits, 0.5).isfinite().tolist() == [[True, True, False, False]]
    assert apply_min_p(logits, 0.0).isfinite().all()


def test_process_logits_order_penalty_then_temperature_then_filters():
    logits = torch.tensor([[4.0, 2.0, -1.0, 1.0]])
    seen = torch.tensor([[True, False, True, False]])
    config = SamplingConfig(temperature=2.0, repetition_penalty=4.0, top_k=3)
    # penalty: [1, 2, -4, 1]; temperature: [0.5, 1, -2, 0.5]; top-3 keeps the ties at 0.5
    expected = torch.tensor([[0.5, 1.0, -math.inf, 0.5]])
    assert torch.equal(process_logits(logits, config, seen), expected)


def test_sampler_seen_mask_starts_with_the_prompt():
    ids = torch.tensor([[1, 1, 3], [0, 2, 2]])
    sampler = Sampler(SamplingConfig(greedy=True), ids, vocab_size=5, seed=0)
    assert sampler.seen.tolist() == [[0, 1, 0, 1, 0], [1, 0, 1, 0, 0]]
    sampler(torch.tensor([[0.0, 0, 0, 0, 9], [9.0, 0, 0, 0, 0]]))
    assert sampler.seen[:, 4].tolist() == [True, False]


def test_stop_tokens_stop_each_sample(lmm):
    free = generate(lmm, prompt(), NEW, greedy=True)[:, PROMPT_LEN:]
    stop = int(free[0, 2])  # sample 0 emits it at step 2 (or earlier)
    for pad in (None, 0):
        out = generate(lmm, prompt(), NEW, greedy=True, stop_tokens=(stop,), pad_token=pad)
        new = out[:, PROMPT_LEN:]
        for b in range(2):
            hits = (free[b] == stop).nonzero()
            end = int(hits[0]) + 1 if len(hits) else NEW
            assert torch.equal(new[b, :end], free[b, :end])
            assert (new[b, end:] == (stop if pad is None else pad)).all()
    single = generate(lmm, prompt()[:1], NEW, greedy=True, stop_tokens=(stop,))
    first = int((free[0] == stop).nonzero()[0])
    assert single.shape == (1, PROMPT_LEN + first + 1)  # all finished: stopped early
    assert single[0, -1] == stop


def test_zero_new_tokens_returns_the_prompt(lmm):
    assert torch.equal(generate(lmm, prompt(), 0), prompt())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": 1.0}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"prompt_ids": torch.zeros(2, 3)}, "prompt_ids"),
        ({"prompt_ids": torch.zeros(3, dtype=torch.long)}, "prompt_ids"),
        ({"prompt_ids": torch.zeros(2, 0, dtype=torch.long)}, "prompt_ids"),
        ({"prompt_ids": torch.full((1, 2), VOCAB)}, "prompt_ids"),
        ({"stop_tokens": (VOCAB,)}, "stop_tokens"),
        ({"pad_token": -1}, "pad_token"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_arguments_raise_naming_them(lmm, kwargs, name):
    args = {"prompt_ids": prompt(), "max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=name):
        generate(lmm, **args)


def test_generation_changes_no_parameter_or_buffer():
    model = tiny_model("mac")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    generate(model, prompt(), NEW, seed=0, repetition_penalty=1.3, top_p=0.9)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
