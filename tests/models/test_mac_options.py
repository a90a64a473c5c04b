"""MAC's options (docs/architectures.md, "MAC options"): what the memory writes and reads
after attention, the retrieved tokens' norm, and which branch gates. The papers' form stays
the field default; every form streams, stays causal, and loads from files saved before the
options existed."""

from __future__ import annotations

import pytest
import torch

import titans_atlas as ta
from helpers import check_older_format
from titans_atlas.models.config import MAC_FIELDS, MAC_GATE_FIELDS

TINY = dict(vocab_size=32, dim=32, depth=2, num_heads=2, window=8)
OPTIONS = dict(mac_memory_input="input", mac_context_norm=True)
GATED = dict(OPTIONS, mac_gate="attention")  # the three options MQAR needs
FORMS = pytest.mark.parametrize(
    "options", [{}, OPTIONS, GATED, dict(mac_gate="attention")],
    ids=["papers", "options", "options-and-gate", "gate"],
)  # fmt: skip


def mac(seed: int = 0, **options) -> ta.LanguageModel:
    torch.manual_seed(seed)
    return ta.create_model("mac", **TINY, **options).eval()


@FORMS
def test_any_split_of_a_stream_gives_the_whole_call(options):
    model, ids = mac(**options), torch.randint(0, 32, (2, 37))
    whole, _ = model(ids)
    pieces, state = [], None
    for part in ids.split([1, 6, 9, 21], dim=1):  # starts inside and at segment edges
        out, state = model(part, state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)


@FORMS
def test_a_later_token_changes_no_earlier_output(options):
    model, ids = mac(**options), torch.randint(0, 32, (1, 30))
    changed = ids.clone()
    changed[0, 20] = (ids[0, 20] + 1) % 32
    torch.testing.assert_close(model(ids)[0][:, :20], model(changed)[0][:, :20])


def test_the_options_change_the_function_and_only_the_norm_adds_parameters():
    papers, options = mac(), mac(**OPTIONS)
    ids = torch.randint(0, 32, (1, 20))
    assert not torch.allclose(papers(ids)[0], options(ids)[0])
    extra = {n for n, _ in options.named_parameters()} - {n for n, _ in papers.named_parameters()}
    assert extra and all("context_norm" in name for name in extra)


def test_the_gate_option_changes_the_function_and_adds_no_parameter():
    papers, gated = mac(), mac(mac_gate="attention")
    with torch.no_grad():  # the gating gain starts at zero (a uniform 0.5): move it
        for block in gated.blocks:
            block.gate.norm_y.weight.uniform_(-1.0, 1.0)
    ids = torch.randint(0, 32, (1, 20))
    assert not torch.allclose(papers(ids)[0], gated(ids)[0])
    assert {n for n, _ in gated.named_parameters()} == {n for n, _ in papers.named_parameters()}
    # every block's gate is swapped (the memory's read passes, y gates it), none in the papers'
    assert all(block.gate.attention_gates for block in gated.blocks)
    assert not any(block.gate.attention_gates for block in papers.blocks)


@pytest.mark.parametrize("name, other", [("mag", "mac_gate"), ("mac", "mag_gate")])
def test_each_gate_option_leaves_the_other_hybrid_unchanged(name, other):
    torch.manual_seed(0)
    a = ta.create_model(name, **TINY).eval()
    torch.manual_seed(0)
    b = ta.create_model(name, **TINY, **{other: "attention"}).eval()
    ids = torch.randint(0, 32, (1, 20))
    torch.testing.assert_close(a(ids)[0], b(ids)[0])


def test_a_format_8_file_loads_with_the_papers_gate(tmp_path):
    check_older_format(mac(**OPTIONS), tmp_path, 8, "mac_gate")


def test_the_gate_option_round_trips_through_a_saved_model(tmp_path):
    model = mac(**GATED)
    model.save_pretrained(str(tmp_path))
    loaded = ta.load_model(str(tmp_path))
    assert loaded.config.mac_gate == "attention"
    ids = torch.randint(0, 32, (1, 12))
    torch.testing.assert_close(loaded(ids)[0], model(ids)[0])


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="mac_gate"):
        ta.create_model("mac", **TINY, mac_gate="both")
    with pytest.raises(ValueError, match="mac_memory_input"):
        ta.create_model("mac", **TINY, mac_memory_input="output")
    with pytest.raises(ValueError, match="mac_context_norm"):
        ta.create_model("mac", **TINY, mac_context_norm="yes")


@pytest.mark.parametrize(
    "version, field",
    [(4, "mac_memory_input"), (4, "mac_context_norm"), (7, "memory.timescale_lr_ratio")],
)
def test_an_older_file_loads_as_the_papers_mac(tmp_path, version, field):
    check_older_format(mac(), tmp_path, version, field)


def test_the_default_mac_is_the_papers_form():
    """What an older file's MAC loads as (``MAC_FIELDS``, ``MAC_GATE_FIELDS``): the papers'
    MAC, which is also today's default."""
    assert MAC_FIELDS == {"mac_memory_input": "attention", "mac_context_norm": False}
    assert MAC_GATE_FIELDS == {"mac_gate": "memory"}
    config = mac().config
    assert (config.mac_memory_input, config.mac_context_norm, config.mac_gate) == (
        "attention",
        False,
        "memory",
    )
