"""Generation and scoring on MLX: greedy decoding equals the torch side's tokens on small
trained checkpoints; the logits processors equal torch's; seeded sampling is reproducible;
stop tokens; streamed log-likelihoods equal torch's; the docs' training loop runs."""

import pytest

mx = pytest.importorskip("mlx.core")

import re
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import titans_atlas as ta
import titans_atlas.generation as tg
import titans_atlas.mlx as tam
from mlx_helpers import assert_close, to_mx, to_np
from titans_atlas.mlx.generate import (
    apply_min_p,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
    process_logits,
)

ROOT = Path(__file__).resolve().parents[2]
# Every byte has one successor (a 40-byte cycle): a few dozen steps learn it with wide
# margins, so greedy decoding is a long, confident continuation on both sides.
TEXT = b"the_quick,brown:fox;jumps.over=lazy-dog! " * 12
# attention + memory, and the Muon / Omega / polynomial memory -> AdamW steps. Atlas learns
# the cycle more slowly since the module-owned init (residual-scaled output projections): at
# 30 steps its greedy continuation was still one repeated byte, at 45 the whole cycle.
TRAINED = {"mag": 30, "atlas": 60}


def train_tiny(name: str, steps: int) -> ta.LanguageModel:
    """A few dozen AdamW steps on the cycle: enough for confident next tokens."""
    torch.manual_seed(0)
    model = ta.create_model(
        name, vocab_size=256, dim=32, depth=2, num_heads=2, window=16, chunk_size=16
    )
    data = torch.tensor(list(TEXT))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - 33, (4,), generator=gen)
        batch = torch.stack([data[s : s + 33] for s in starts.tolist()])
        logits, _ = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """name -> (trained torch model, MLX model loaded from its checkpoint)."""
    models = {}
    for name in TRAINED:
        model = train_tiny(name, TRAINED[name])
        directory = tmp_path_factory.mktemp(name)
        model.save_pretrained(str(directory))
        models[name] = (model, tam.load_model(directory))
    return models


def prompts() -> torch.Tensor:
    return torch.tensor([list(b"the_quick,brown"), list(b"jumps.over=lazy")])


@pytest.mark.parametrize("penalty", [1.0, 1.3])
@pytest.mark.parametrize("name", list(TRAINED))
def test_greedy_tokens_equal_torch(name, penalty, trained):
    torch_model, mlx_model = trained[name]
    expected = tg.generate(torch_model, prompts(), 40, greedy=True, repetition_penalty=penalty)
    actual = tam.generate(mlx_model, to_mx(prompts()), 40, greedy=True, repetition_penalty=penalty)
    assert actual.dtype == mx.int32
    assert np.array_equal(to_np(actual), expected.numpy())
    assert len(set(expected[:, 15:].flatten().tolist())) > 5  # a real continuation


def test_stop_tokens_and_padding_equal_torch(trained):
    torch_model, mlx_model = trained["mag"]
    free = tg.generate(torch_model, prompts(), 24, greedy=True)
    # a token sample 0 emits mid-way and sample 1 never: sample 0 finishes, the batch runs on
    others = set(free[1, 15:].tolist())
    stop = next(t for t in free[0, 17:30].tolist() if t not in others)
    for pad in (None, 0):
        options = {"greedy": True, "stop_tokens": [stop], "pad_token": pad}
        expected = tg.generate(torch_model, prompts(), 24, **options)
        actual = tam.generate(mlx_model, prompts(), 24, **options)
        assert np.array_equal(to_np(actual), expected.numpy())
        row = to_np(actual)[0, 15:].tolist()
        after = row[row.index(stop) + 1 :]
        assert after and set(after) == {stop if pad is None else pad}  # finished: filled


def test_seeded_sampling_is_reproducible_and_leaves_the_global_key_alone(trained):
    model = trained["mag"][1]
    mx.random.seed(7)
    before = mx.random.uniform(shape=(3,))
    mx.random.seed(7)
    options = {"seed": 123, "top_k": 20, "top_p": 0.95, "min_p": 0.01, "temperature": 1.5}
    first = tam.generate(model, prompts(), 20, **options)
    assert np.array_equal(np.array(mx.random.uniform(shape=(3,))), np.array(before))
    assert np.array_equal(np.array(tam.generate(model, prompts(), 20, **options)), np.array(first))
    other = tam.generate(model, prompts(), 20, **{**options, "seed": 124})
    assert not np.array_equal(np.array(other), np.array(first))
    tam.generate(model, prompts(), 5)  # seed=None: random


def test_sampling_follows_the_processed_distribution():
    """Draws of many samples land only on tokens the filters keep, in rough proportion."""
    logits = mx.log(mx.array([[0.5, 0.3, 0.15, 0.05]] * 2000))
    sampler = tam.Sampler(tam.SamplingConfig(top_p=0.7), mx.zeros((2000, 1), mx.int32), 4, seed=0)
    counts = np.bincount(np.array(sampler(logits)), minlength=4)
    assert counts[2] == counts[3] == 0  # top-p keeps 0.5 + 0.3
    assert abs(counts[0] / 2000 - 0.5 / 0.8) < 0.05


def test_logits_processors_equal_torch():
    gen = torch.Generator().manual_seed(3)
    logits = 3 * torch.randn(4, 40, generator=gen)
    seen = torch.rand(4, 40, generator=gen) < 0.3
    checks = [
        (tg.apply_top_k(logits, 7), apply_top_k(to_mx(logits), 7)),
        (tg.apply_top_p(logits, 0.8), apply_top_p(to_mx(logits), 0.8)),
        (tg.apply_min_p(logits, 0.05), apply_min_p(to_mx(logits), 0.05)),
        (
            tg.apply_repetition_penalty(logits, seen, 1.4),
            apply_repetition_penalty(to_mx(logits), to_mx(seen), 1.4),
        ),
    ]
    config = tg.SamplingConfig(
        temperature=0.7, top_k=12, top_p=0.9, min_p=0.02, repetition_penalty=1.2
    )
    checks.append(
        (
            tg.process_logits(logits, config, seen),
            process_logits(to_mx(logits), config, to_mx(seen)),
        )
    )
    for expected, actual in checks:
        expected, actual = expected.numpy(), np.array(actual)
        assert np.array_equal(np.isinf(actual), np.isinf(expected))
        finite = ~np.isinf(expected)
        assert np.allclose(actual[finite], expected[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"stop_tokens": [999]}, "stop_tokens"),
        ({"pad_token": 300}, "pad_token"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": -1.0}, "temperature"),
    ],
)
def test_bad_generate_arguments_are_value_errors(trained, kwargs, message):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        tam.generate(trained["mag"][1], prompts(), **args)
    with pytest.raises(ValueError, match="prompt_ids"):
        tam.generate(trained["mag"][1], [[0.5]], 3)


def test_streamed_log_likelihoods_equal_torch(trained):
    torch_model, mlx_model = trained["atlas"]
    ids = torch.tensor([list(TEXT[:70]), list(TEXT[105:175])])
    with torch.no_grad():
        logits, _ = torch_model(ids)
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    for piece in (70, 16, 9):
        scores, state = tam.token_log_likelihoods(mlx_model, ids, piece_tokens=piece)
        assert state.position == 70
        assert_close(scores, expected, 1e-4, f"piece {piece}")
    ppl = tam.perplexity(mlx_model, ids, piece_tokens=16)
    assert abs(ppl - float(torch.exp(-expected.mean()))) < 1e-3 * ppl
    assert ppl < 10  # trained: far better than uniform over 256 bytes


def test_decode_one_token_scores_equal_a_full_forward(trained):
    _, model = trained["atlas"]
    last, state = tam.prefill(model, prompts())
    sampler = tam.Sampler(tam.SamplingConfig(greedy=True), to_mx(prompts()), 256)
    token, scores = sampler(last), [last]
    for _ in range(12):
        token, logits, state = tam.decode_one_token(model, token, state, sampler)
        scores.append(logits)
    out = mx.concatenate([to_mx(prompts()), mx.stack([s.argmax(-1) for s in scores], 1)], axis=1)
    full, _ = model(out.astype(mx.int32))
    assert_close(mx.stack(scores, 1), full[:, 14:-1], 1e-4, "scores")


def test_docs_training_example_runs(tmp_path):
    """docs/mlx.md's training loop, as written (checkpoint path redirected)."""
    doc = (ROOT / "docs" / "mlx.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    code = code.replace("/tmp/mlx-ckpt", str(tmp_path / "ckpt"))
    namespace: dict = {}
    exec(compile(code, "docs/mlx.md", "exec"), namespace)
    assert namespace["losses"][-1] < namespace["losses"][0]
    ta.load_model(str(tmp_path / "ckpt"))  # the MLX-trained checkpoint loads in torch
