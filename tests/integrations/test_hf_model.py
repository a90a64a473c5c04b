"""The models under transformers: folders round-trip with identical logits, HF ``generate``
equals our greedy ``generate`` token for token at our per-token cost, and left-padded batches
give each row its own unbatched output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from hf_helpers import TINY, tiny
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

import titans_atlas as ta
from titans_atlas.generation import generate
from titans_atlas.integrations.hf import (
    TitansAtlasCache,
    TitansAtlasConfig,
    TitansAtlasForCausalLM,
    export_hf,
    import_hf,
    to_hf_model,
)
from titans_atlas.layers.memory_config import (
    FORMAT_7_FIELDS,
    FORMAT_8_FIELDS,
    LATER_FIELDS,
    UNBOUNDED_GATES,
)

GENERATION_MODELS = ["lmm", "mac", "mag", "mal", "atlas", "omeganet", "swa", "transformer"]


def prompt(length: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def logits_of(model: ta.LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)[0]


def count_forward_lengths(model: ta.LanguageModel) -> list[int]:
    """Record the length of every piece fed to ``model`` (an instance-level spy)."""
    lengths, forward = [], model.forward

    def spy(input_ids, state=None, **kwargs):
        lengths.append(input_ids.shape[1])
        return forward(input_ids, state, **kwargs)

    model.forward = spy
    return lengths


# ---------------------------------------------------------------------------------------------
# Folders


@pytest.mark.parametrize("name", ta.list_models())
def test_our_directory_to_hf_folder_and_back_keeps_the_logits(tmp_path, name):
    model, ids = tiny(name), prompt(11, batch=2)
    model.save_pretrained(str(tmp_path / "ours"))
    export_hf(tmp_path / "ours", tmp_path / "hf")
    hf_model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))
    assert isinstance(hf_model, TitansAtlasForCausalLM)
    assert torch.equal(hf_model(ids).logits, logits_of(model, ids))
    import_hf(tmp_path / "hf", tmp_path / "back")
    assert torch.equal(logits_of(ta.load_model(tmp_path / "back"), ids), logits_of(model, ids))
    assert (tmp_path / "back" / "tokenizer_spec.json").is_file()


def test_untied_head_round_trips(tmp_path):
    model, ids = tiny("mag", tie_embeddings=False), prompt(9)
    to_hf_model(model).save_pretrained(str(tmp_path))
    loaded = TitansAtlasForCausalLM.from_pretrained(str(tmp_path))
    assert loaded.model.head.weight.data_ptr() != loaded.model.embed.weight.data_ptr()
    assert torch.equal(loaded(ids).logits, logits_of(model, ids))


def test_save_pretrained_from_pretrained_of_the_hf_class(tmp_path):
    hf_model = to_hf_model(tiny("atlas"))
    hf_model.save_pretrained(str(tmp_path))
    loaded = TitansAtlasForCausalLM.from_pretrained(str(tmp_path))
    assert loaded.config.model_config == hf_model.config.model_config
    assert isinstance(AutoConfig.from_pretrained(str(tmp_path)), TitansAtlasConfig)
    ids = prompt(10)
    assert torch.equal(loaded(ids).logits, hf_model(ids).logits)
    tied = loaded.model.head.weight.data_ptr() == loaded.model.embed.weight.data_ptr()
    assert tied


def test_a_missing_weight_is_a_checkpoint_error(tmp_path):
    to_hf_model(tiny("lmm")).save_pretrained(str(tmp_path))
    weights = load_file(str(tmp_path / "model.safetensors"))
    weights.pop("model.norm.weight")
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ta.CheckpointError, match=r"model\.norm\.weight"):
        TitansAtlasForCausalLM.from_pretrained(str(tmp_path))


def test_import_of_a_folder_without_config_is_a_checkpoint_error(tmp_path):
    with pytest.raises(ta.CheckpointError, match=r"no config\.json"):
        import_hf(tmp_path, tmp_path / "out")


def test_import_never_reads_a_pickle_weight_file(tmp_path):
    # pytorch_model.bin is a pickle: loading one can run code, so import refuses the folder
    hf = tmp_path / "hf"
    to_hf_model(tiny("lmm")).save_pretrained(str(hf))
    weights = load_file(str(hf / "model.safetensors"))
    (hf / "model.safetensors").unlink()
    torch.save(weights, hf / "pytorch_model.bin")
    with pytest.raises(ta.CheckpointError, match=r"holds no model\.safetensors"):
        import_hf(hf, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_failed_import_leaves_no_model_directory_behind(tmp_path):
    ours, hf = tmp_path / "ours", tmp_path / "hf"
    tiny("lmm").save_pretrained(str(ours))
    export_hf(ours, hf)
    (hf / "tokenizer.json").write_text("{not json")
    with pytest.raises(ta.CheckpointError, match="cannot convert its tokenizer"):
        import_hf(hf, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"ours", "hf"}  # no staging folder left


# ---------------------------------------------------------------------------------------------
# Generation


@pytest.mark.parametrize("name", GENERATION_MODELS)
def test_hf_greedy_generate_equals_ours_at_one_token_per_step(name):
    model = tiny(name)
    hf_model = to_hf_model(model)
    ids = prompt(7, batch=2)  # crosses window 4 and chunk 3; the new tokens cross more
    expected = generate(model, ids, 12, greedy=True)
    lengths = count_forward_lengths(model)
    out = hf_model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(out, expected)
    assert lengths == [7] + [1] * 11  # the prompt once, then one token per step


@pytest.mark.parametrize("name", ["lmm", "mac", "atlas", "transformer"])
def test_left_padded_rows_equal_their_unbatched_generation(name):
    model = tiny(name)
    hf_model = to_hf_model(model)
    rows = [prompt(length, seed=length + i) for i, length in enumerate([5, 1, 9, 5])]
    width = max(row.shape[1] for row in rows)
    ids = torch.stack([F.pad(row[0], (width - row.shape[1], 0)) for row in rows])  # pads: 0
    mask = torch.stack([(torch.arange(width) >= width - row.shape[1]).long() for row in rows])
    expected = [generate(model, row, 8, greedy=True)[0, -8:] for row in rows]
    lengths = count_forward_lengths(model)
    out = hf_model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    for i in range(len(rows)):
        assert torch.equal(out[i, width:], expected[i]), i
    assert sorted(lengths[:3]) == [1, 5, 9]  # one prefill per distinct length, pads never fed
    assert lengths[3:] == [1] * 3 * 7  # then one token per group per step


def test_left_padded_logits_equal_each_row_alone():
    model = tiny("mag")
    hf_model = to_hf_model(model)
    short, long = prompt(3, seed=4), prompt(6, seed=5)
    ids = torch.cat([F.pad(short, (3, 0)), long])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    logits = hf_model(ids, attention_mask=mask).logits
    assert torch.equal(logits[0, 3:], logits_of(model, short)[0])
    assert torch.equal(logits[0, :3], torch.zeros(3, 256))
    assert torch.equal(logits[1], logits_of(model, long)[0])


def test_continuing_from_a_returned_cache_equals_one_generation():
    model = tiny("mac")
    hf_model, ids = to_hf_model(model), prompt(6, batch=2)
    first = hf_model.generate(ids, max_new_tokens=5, do_sample=False, return_dict_in_generate=True)
    assert isinstance(first.cache, TitansAtlasCache) and first.cache.columns == 10
    more = hf_model.generate(first.sequences, cache=first.cache, max_new_tokens=6, do_sample=False)
    assert torch.equal(more, generate(model, ids, 11, greedy=True))


def test_a_cache_from_our_state_continues_our_stream():
    model = tiny("lmm")
    hf_model, ids = to_hf_model(model), prompt(12)
    _, state = model(ids[:, :8])
    cache = TitansAtlasCache.from_state(state)
    logits = hf_model(ids[:, 8:], cache=cache).logits
    assert torch.equal(logits, model(ids[:, 8:], state)[0])
    assert cache.state.position == 12 and cache.get_seq_length() == 12


def test_sampling_runs_and_keeps_the_prompt():
    hf_model, ids = to_hf_model(tiny("swa")), prompt(5, batch=2)
    out = hf_model.generate(ids, max_new_tokens=6, do_sample=True, top_k=20)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], ids)


# ---------------------------------------------------------------------------------------------
# Padding the models cannot honour, and other errors


def test_right_padding_keeps_real_logits_but_cannot_be_continued():
    model = tiny("lmm")
    hf_model = to_hf_model(model)
    ids, mask = prompt(6, batch=2), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    out = hf_model(ids, attention_mask=mask)
    # causal: the padding does not reach the real tokens (a batch of 2 against a batch of 1
    # may round differently in the BLAS, ~1e-8)
    torch.testing.assert_close(out.logits[1, :4], logits_of(model, ids[1:, :4])[0])
    with pytest.raises(ValueError, match="end with padding"):
        hf_model(prompt(1, batch=2), attention_mask=torch.ones(2, 7), cache=out.cache)
    with pytest.raises(ValueError, match="end with padding"):
        hf_model(prompt(1, batch=2), cache=out.cache)  # without a mask too


def test_padding_between_tokens_is_a_value_error():
    hf_model = to_hf_model(tiny("lmm"))
    with pytest.raises(ValueError, match="between real tokens"):
        hf_model(prompt(4, batch=2), attention_mask=torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1]]))
    with pytest.raises(ValueError, match="without any real token"):
        hf_model(prompt(4, batch=2), attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]))


def test_a_continuation_mask_that_disagrees_with_the_cache_is_a_value_error():
    hf_model = to_hf_model(tiny("lmm"))
    out = hf_model(prompt(4, batch=2), attention_mask=torch.tensor([[0, 1, 1, 1], [1] * 4]))
    with pytest.raises(ValueError, match="does not match the padding"):
        hf_model(prompt(1, batch=2), attention_mask=torch.ones(2, 5), cache=out.cache)
    with pytest.raises(ValueError, match=r"must be \[2, 5\]"):
        hf_model(prompt(1, batch=2), attention_mask=torch.ones(2, 3), cache=out.cache)


def test_a_failing_call_leaves_the_cache_as_it_was():
    model = tiny("mac")
    hf_model, ids = to_hf_model(model), prompt(6, batch=2)
    cache = hf_model(ids[:, :4], attention_mask=torch.tensor([[0, 1, 1, 1], [1] * 4])).cache
    states, columns = [group.state for group in cache.groups], cache.columns
    with pytest.raises(ValueError, match="input_ids must lie in"):
        hf_model(torch.tensor([[999], [1]]), cache=cache)  # the second group fails
    assert all(group.state is state for group, state in zip(cache.groups, states))
    assert cache.columns == columns
    with pytest.raises(ValueError, match="shape"):
        hf_model(ids, attention_mask=torch.ones(2, 5))


def test_beam_search_says_it_is_not_supported():
    hf_model = to_hf_model(tiny("lmm"))
    with pytest.raises(NotImplementedError, match="beam search"):
        hf_model.generate(prompt(4, batch=2), max_new_tokens=3, num_beams=2, do_sample=False)


def test_unsupported_forward_arguments_are_value_errors():
    hf_model = to_hf_model(tiny("lmm"))
    with pytest.raises(ValueError, match="position_ids"):
        hf_model(prompt(3), position_ids=torch.arange(3)[None])
    with pytest.raises(ValueError, match="inputs_embeds"):
        hf_model(prompt(3), inputs_embeds=torch.zeros(1, 3, 16))


def test_loss_is_the_shifted_cross_entropy():
    model = tiny("lmm")
    ids, labels = prompt(9, batch=2), prompt(9, batch=2, seed=7)
    labels[0, 4] = -100
    logits = logits_of(model, ids)
    keep = labels[:, 1:] != -100
    expected = F.cross_entropy(logits[:, :-1][keep], labels[:, 1:][keep])
    loss = to_hf_model(model)(ids, labels=labels).loss
    torch.testing.assert_close(loss, expected)
    loss.backward()  # trains through the wrapper: gradients reach our parameters
    assert model.embed.weight.grad is not None and model.embed.weight.grad.abs().sum() > 0


def test_a_config_saved_before_the_stability_fields_keeps_its_layer():
    """An HF folder written before momentum_max / decay_min / max_grad_norm / decay_target
    existed has a complete memory dict without them: it reads as the unbounded layer it was;
    a partial dict takes today's defaults."""
    saved = ta.model_config("lmm").to_dict()
    for key in [*UNBOUNDED_GATES, *LATER_FIELDS, *FORMAT_7_FIELDS, *FORMAT_8_FIELDS]:  # nor later
        saved["memory"].pop(key)
    memory = TitansAtlasConfig(titans=saved).model_config.memory
    assert all(getattr(memory, key) == value for key, value in UNBOUNDED_GATES.items())
    partial = TitansAtlasConfig(titans={"name": "lmm", "memory": {"chunk_size": 8}})
    assert partial.model_config.memory.max_grad_norm == ta.MemoryConfig().max_grad_norm


def test_an_atlas_config_saved_before_the_omega_gate_source_keeps_the_step_s_gates():
    """An HF folder of an ATLAS model saved after the stability fields but before
    ``omega_gate_source`` was trained with the step's gates: it reads as "step", not as the
    preset's "tap"."""
    saved = ta.model_config("atlas").to_dict()
    assert saved["memory"].pop("omega_gate_source") == "tap"
    memory = TitansAtlasConfig(titans=saved).model_config.memory
    assert memory.omega_gate_source == "step" and memory.omega_window == 8


def test_config_mirrors_must_agree_with_the_model_config():
    config = ta.model_config("mac", dim=32, num_heads=2)
    hf_config = TitansAtlasConfig.from_model_config(config)
    assert (hf_config.hidden_size, hf_config.num_attention_heads) == (32, 2)
    assert hf_config.model_config == config
    with pytest.raises(ValueError, match="hidden_size"):
        TitansAtlasConfig(titans=config.to_dict(), hidden_size=64)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["mac", "atlas"])
def test_hf_generate_on_cuda_equals_ours_on_cuda(name):
    model = tiny(name).cuda()
    hf_model, ids = to_hf_model(model), prompt(7, batch=2).cuda()
    out = hf_model.generate(ids, max_new_tokens=10, do_sample=False)
    assert out.device.type == "cuda"
    assert torch.equal(out, generate(model, ids, 10, greedy=True))


def test_a_model_built_from_an_hf_config_keeps_our_initialisation():
    config = ta.model_config("atlas", **{**TINY, "num_persistent": 2})
    torch.manual_seed(3)
    ours = ta.create_model("atlas", **{**TINY, "num_persistent": 2})
    torch.manual_seed(3)
    theirs = AutoModelForCausalLM.from_config(TitansAtlasConfig.from_model_config(config))
    expected = ours.state_dict()
    for name, tensor in theirs.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name  # HF's generic init left nothing
