"""Inputs a fuzzing review found unhandled (2026-12-08): each is now refused with one line
naming the argument or file, before anything is lost, read from elsewhere or allocated."""

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_world import train_argv
from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.io import CheckpointError, load_model


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "run"
    assert main(train_argv(out)) == 0
    return out


@pytest.fixture
def model_dir(tmp_path) -> Path:
    directory = tmp_path / "model"
    create_model("lmm", preset="debug").save_pretrained(str(directory))
    return directory


def generate(checkpoint, *extra) -> list[str]:
    return ["generate", "--checkpoint", str(checkpoint), "--prompt", "Hi",
            "--max-new-tokens", "2", *extra]  # fmt: skip


def test_save_state_never_overwrites_the_model_a_checkpoint_or_the_prompt(run, tmp_path, capsys):
    model = next((run / "checkpoints").glob("step_*")) / "model"
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    for target in (model / "model.safetensors", model / "new.safetensors"):
        assert main(generate(model, "--save-state", str(target))) == 2
        assert "is inside the model directory" in capsys.readouterr().err
    inside = run / "checkpoints" / "chat.safetensors"
    assert main(generate(run, "--save-state", str(inside))) == 2
    assert "is inside the run's checkpoints" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Hi")
    argv = ["generate", "--checkpoint", str(run), "--prompt-file", str(prompt),
            "--max-new-tokens", "2", "--save-state", str(prompt)]  # fmt: skip
    assert main(argv) == 2
    assert "is the --prompt-file it reads" in capsys.readouterr().err
    assert prompt.read_text() == "Hi"
    assert main(generate(run, "--save-state", str(tmp_path / "chat.safetensors"))) == 0


@pytest.mark.parametrize("source", ["", "   "])
def test_an_empty_data_source_is_refused_not_the_working_directory(source, tmp_path, capsys):
    argv = train_argv(tmp_path / "run", f"--set=data.source={source}")
    assert main(argv) == 2
    assert "data.source must name a file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_force_keeps_a_checkpoints_folder_that_no_run_wrote(tmp_path, capsys):
    mine = tmp_path / "out" / "checkpoints" / "important.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("keep me")
    assert main(train_argv(tmp_path / "out", "--force")) == 2
    assert "holds 'important.txt', not a training's file" in capsys.readouterr().err
    assert mine.read_text() == "keep me"


def test_links_out_of_a_model_directory_are_refused(model_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("config.json", "model.safetensors"):
        copy = tmp_path / f"copy-{name}"
        copy.mkdir()
        for path in model_dir.iterdir():
            (copy / path.name).write_bytes(path.read_bytes())
        (elsewhere / name).write_bytes((copy / name).read_bytes())
        (copy / name).unlink()
        os.symlink(elsewhere / name, copy / name)
        with pytest.raises(CheckpointError, match=f"{name} is a link that leads outside"):
            load_model(copy)
    inside = tmp_path / "inside"  # a link within the folder is the folder's own file
    inside.mkdir()
    for path in model_dir.iterdir():
        (inside / f"real-{path.name}").write_bytes(path.read_bytes())
        os.symlink(inside / f"real-{path.name}", inside / path.name)
    load_model(inside)


def test_a_checkpoint_whose_model_folder_is_a_link_elsewhere_is_refused(run, tmp_path, capsys):
    copy = tmp_path / "step"
    step = next((run / "checkpoints").glob("step_*"))
    copy.mkdir()
    os.symlink(step / "model", copy / "model")
    assert main(generate(copy)) == 2
    assert "is a link that leads outside" in capsys.readouterr().err


def rewrite_config(directory: Path, change) -> None:
    meta = json.loads((directory / "config.json").read_text())
    change(meta["config"])
    (directory / "config.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(dim=2**40), r"dim must be an integer in \[1, 65536\]"),
        (lambda c: c["memory"].update(poly_degree=40), r"poly_degree must be an integer in"),
        (lambda c: c["memory"].update(output_init=1e308), r"output_init must be a number in"),
        (lambda c: c["memory"].update(lr_max=1e308), r"lr_max must be a finite number in"),
        (lambda c: c["memory"].update(conv_kernel=10**9), r"conv_kernel must be an integer in"),
    ],
)
def test_absurd_sizes_in_config_json_are_refused_by_name(model_dir, change, message):
    rewrite_config(model_dir, change)
    with pytest.raises(CheckpointError, match=message):
        load_model(model_dir)


def test_config_json_nested_too_deep_or_with_a_huge_int_is_one_error(model_dir):
    (model_dir / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=r"config\.json is not a config\.json this library"):
        load_model(model_dir)
    (model_dir / "config.json").write_text('{"format": ' + "9" * 5000 + "}")
    with pytest.raises(CheckpointError, match=r"config\.json is not"):
        load_model(model_dir)


def test_float8_weights_are_refused_by_name(model_dir):
    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    name = next(iter(tensors))
    tensors[name] = tensors[name].to(torch.float8_e4m3fn)
    save_file(tensors, str(path), metadata={"model": "lmm"})
    with pytest.raises(CheckpointError, match=rf"{name}' has dtype torch.float8_e4m3fn; weights"):
        load_model(model_dir)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"dim": 2**40, "num_heads": 1, "depth": 1}, r"dim must be an integer in"),
        ({"ffn_expansion": 1e9}, r"ffn_expansion must be a finite number in"),
        ({"expansion": 1e9}, r"expansion must be a finite number in"),
        ({"num_persistent": 10**9}, r"num_persistent must be an integer in"),
        ({"conv_kernel": 10**9}, r"conv_kernel must be an integer in"),
        ({"output_init": 11}, r"output_init must be a number in \[0, 10\]"),
    ],
)
def test_sizes_past_any_model_are_refused_before_allocating(settings, message):
    with pytest.raises(ValueError, match=message):
        create_model("lmm", preset="debug", **settings)


def test_a_polynomial_map_too_wide_to_hold_is_refused_by_its_degree():
    with pytest.raises(ValueError, match=r"poly_degree=10 maps a \d+-wide head to"):
        create_model("atlas", preset="debug", poly_degree=10)


def test_a_seed_past_64_bits_is_refused_by_name(tmp_path, capsys):
    assert main(train_argv(tmp_path / "run", f"--set=train.seed={2**32}")) == 2
    assert "train.seed must be < 2**32" in capsys.readouterr().err


def test_prepare_on_a_finished_shard_folder_says_what_it_is(tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text("hello world " * 200)
    assert main(["prepare", str(text), "--out", str(tmp_path / "shards")]) == 0
    capsys.readouterr()
    assert main(["prepare", str(tmp_path / "shards"), "--out", str(tmp_path / "again")]) == 2
    assert "is a shard folder (token ids from titans prepare), not text" in capsys.readouterr().err


def test_best_on_one_model_and_a_missing_pointer_say_what_is_wrong(run, model_dir):
    from titans_atlas.io.training import resolve_model_dir

    with pytest.raises(CheckpointError, match="is one model, not a run directory: --best"):
        resolve_model_dir(model_dir, "best")
    step = next((run / "checkpoints").glob("step_*"))
    with pytest.raises(CheckpointError, match="is one model, not a run directory: --best"):
        resolve_model_dir(step, "best")
    assert resolve_model_dir(model_dir) == model_dir


def test_a_run_without_its_pointer_names_the_missing_file(tmp_path):
    from titans_atlas.io.training import find_checkpoint

    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match=r"checkpoints has no latest\.json"):
        find_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=r"has no best\.json \(no evaluation has run"):
        find_checkpoint(tmp_path, "best")


def test_a_jsonl_text_field_that_is_not_a_string_is_named(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": 5}\n')
    assert main(train_argv(tmp_path / "run", f"--set=data.source={data}")) == 2
    assert "field 'text' must be a string, got int" in capsys.readouterr().err


def test_an_hf_tokenizer_folder_without_its_file_is_named_offline(tmp_path, monkeypatch, capsys):
    from titans_atlas.tokenizers import load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the hub line would show if it were asked
    with pytest.raises(ValueError, match=r"has no tokenizer\.json, and transformers cannot"):
        load_tokenizer(f"hf:{tmp_path}")
    assert "asking the Hugging Face hub" not in capsys.readouterr().err


def test_an_hf_config_without_its_titans_entry_says_so():
    pytest.importorskip("transformers")
    from titans_atlas.integrations.hf.config import TitansAtlasConfig

    with pytest.raises(ValueError, match="hidden_size=32 without a 'titans' entry"):
        TitansAtlasConfig(hidden_size=32)


def test_a_hugging_face_cache_snapshot_of_links_into_its_blobs_loads(model_dir, tmp_path):
    repo = tmp_path / "models--me--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted(model_dir.iterdir())):
        blob = repo / "blobs" / f"sha{i}"
        blob.write_bytes(path.read_bytes())
        os.symlink(os.path.relpath(blob, snapshot), snapshot / path.name)
    load_model(snapshot)
    other = tmp_path / "models--me--other" / "snapshots" / "x"  # another repo's blobs: no
    other.mkdir(parents=True)
    for path in snapshot.iterdir():
        os.symlink(path.resolve(), other / path.name)
    with pytest.raises(CheckpointError, match="is a link that leads outside"):
        load_model(other)


@pytest.mark.parametrize("folder", ["tensorboard", "control", "control/checkpoints"])
def test_force_keeps_the_other_run_folders_when_they_hold_foreign_files(folder, tmp_path, capsys):
    mine = tmp_path / "out" / folder / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("keep me")
    assert main(train_argv(tmp_path / "out", "--force")) == 2
    assert "holds 'notes.txt', not a training's file" in capsys.readouterr().err
    assert mine.read_text() == "keep me"


def test_force_still_restarts_a_recall_run_with_its_control(tmp_path):
    out = tmp_path / "out"
    for name in ("checkpoints/step_00000001", "control/checkpoints/step_00000001", "tensorboard"):
        (out / name).mkdir(parents=True)
    (out / "control" / "run_config.json").write_text("{}")
    (out / "tensorboard" / "events.out.tfevents.1.host").write_text("")
    (out / "checkpoints" / "latest.json").write_text("{}")
    (out / "run_config.json").write_text("{}")
    assert main(train_argv(out, "--force")) == 0
    assert not (out / "control").exists() and not (out / "tensorboard").exists()
