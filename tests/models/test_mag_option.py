"""MAG's option (docs/architectures.md, "MAG option"): which branch gates the other. The
papers' form ("memory") stays the default; both forms stream, stay causal, add no parameters,
and files saved before the option load as the papers' form."""

from __future__ import annotations

import pytest
import torch

import titans_atlas as ta
from helpers import check_older_format

TINY = dict(vocab_size=32, dim=32, depth=2, num_heads=2, window=8)


def mag(seed: int = 0, **options) -> ta.LanguageModel:
    torch.manual_seed(seed)
    return ta.create_model("mag", **TINY, **options).eval()


@pytest.mark.parametrize("gate", ["memory", "attention"])
def test_any_split_of_a_stream_gives_the_whole_call(gate):
    model, ids = mag(mag_gate=gate), torch.randint(0, 32, (2, 37))
    whole, _ = model(ids)
    pieces, state = [], None
    for part in ids.split([1, 6, 9, 21], dim=1):
        out, state = model(part, state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)


@pytest.mark.parametrize("gate", ["memory", "attention"])
def test_a_later_token_changes_no_earlier_output(gate):
    model, ids = mag(mag_gate=gate), torch.randint(0, 32, (1, 30))
    changed = ids.clone()
    changed[0, 20] = (ids[0, 20] + 1) % 32
    torch.testing.assert_close(model(ids)[0][:, :20], model(changed)[0][:, :20])


def test_attention_gates_the_memory_read_from_a_uniform_half():
    model = mag(mag_gate="attention")
    papers = mag()
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in papers.named_parameters()]
    for block in model.blocks:
        assert torch.equal(block.gate.norm_y.weight, torch.zeros_like(block.gate.norm_y.weight))
        assert torch.equal(block.gate.norm_m.weight, torch.ones_like(block.gate.norm_m.weight))
    y, m = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    gate = model.blocks[0].gate
    torch.testing.assert_close(gate(y, m), 0.5 * gate.norm_m(m))  # sigmoid(0) = 1/2
    with torch.no_grad():
        gate.norm_y.weight.fill_(1.0)
    expected = gate.norm_m(m) * torch.sigmoid(gate.norm_y(y))
    torch.testing.assert_close(gate(y, m), expected)
    # the papers' gate is untouched, and the memory's read still reaches the loss
    torch.testing.assert_close(
        papers.blocks[0].gate(y, m),
        papers.blocks[0].gate.norm_y(y) * torch.sigmoid(papers.blocks[0].gate.norm_m(m)),
    )
    ids = torch.randint(0, 32, (1, 16))
    model.train()
    model(ids)[0].sum().backward()
    memory = model.blocks[0].memory
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in memory.parameters())


def test_a_bad_option_names_the_field():
    with pytest.raises(ValueError, match="mag_gate"):
        ta.create_model("mag", **TINY, mag_gate="both")


def test_a_format_5_file_loads_as_the_papers_mag(tmp_path):
    check_older_format(mag(), tmp_path, 5, "mag_gate")


def test_the_option_round_trips_through_a_saved_model(tmp_path):
    model = mag(mag_gate="attention")
    model.save_pretrained(str(tmp_path))
    loaded = ta.load_model(str(tmp_path))
    assert loaded.config.mag_gate == "attention"
    ids = torch.randint(0, 32, (1, 12))
    torch.testing.assert_close(loaded(ids)[0], model(ids)[0])
