"""MAC's options (docs/architectures.md, "MAC options"): what the memory writes and reads
after attention, and the retrieved tokens' norm. The papers' form stays the field default;
both forms stream, stay causal, and load from files saved before the options existed."""

from __future__ import annotations

import json

import pytest
import torch

import titans_atlas as ta

TINY = dict(vocab_size=32, dim=32, depth=2, num_heads=2, window=8)
OPTIONS = dict(mac_memory_input="input", mac_context_norm=True)


def mac(seed: int = 0, **options) -> ta.LanguageModel:
    torch.manual_seed(seed)
    return ta.create_model("mac", **TINY, **options).eval()


@pytest.mark.parametrize("options", [{}, OPTIONS], ids=["papers", "options"])
def test_any_split_of_a_stream_gives_the_whole_call(options):
    model, ids = mac(**options), torch.randint(0, 32, (2, 37))
    whole, _ = model(ids)
    pieces, state = [], None
    for part in ids.split([1, 6, 9, 21], dim=1):  # starts inside and at segment edges
        out, state = model(part, state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)


@pytest.mark.parametrize("options", [{}, OPTIONS], ids=["papers", "options"])
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


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="mac_memory_input"):
        ta.create_model("mac", **TINY, mac_memory_input="output")
    with pytest.raises(ValueError, match="mac_context_norm"):
        ta.create_model("mac", **TINY, mac_context_norm="yes")


def test_a_format_4_file_loads_as_the_papers_mac(tmp_path):
    model = mac()
    model.save_pretrained(str(tmp_path))
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["version"] == 8 and meta["config"]["mac_memory_input"] == "attention"
    for name in ("mac_memory_input", "mac_context_norm", "mag_gate"):
        del meta["config"][name]
    del meta["config"]["memory"]["timescale_ratio"]  # added in format 7
    del meta["config"]["memory"]["timescale_lr_ratio"]  # added in format 8
    (tmp_path / "config.json").write_text(json.dumps({**meta, "version": 4}))
    loaded = ta.load_model(str(tmp_path))
    assert (loaded.config.mac_memory_input, loaded.config.mac_context_norm) == ("attention", False)
    ids = torch.randint(0, 32, (1, 12))
    torch.testing.assert_close(loaded(ids)[0], model(ids)[0])
    # a format-4 file cannot name a field that format did not have
    meta["config"]["mac_context_norm"] = True
    (tmp_path / "config.json").write_text(json.dumps({**meta, "version": 4}))
    with pytest.raises(ta.CheckpointError, match="mac_context_norm"):
        ta.load_model(str(tmp_path))
