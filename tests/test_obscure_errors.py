"""Failures that used to end in a raw traceback or an unusable message (issue 37, "obscure"):
each is now one line naming the argument or file and what would be valid, and nothing is
lost."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.io import CheckpointError, load_model

QUIET = ["--set=train.threads=1", "--set=train.progress=false", "--set=train.sample_tokens=0"]
TINY = ["--set=train.eval_tokens=256", "--set=train.batch_size=2", "--set=train.seq_len=32"]


def train_argv(out: Path, *extra: str) -> list[str]:
    return ["train", "--preset", "debug", "--out", str(out), "--steps", "1", *QUIET, *TINY, *extra]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    create_model("lmm", preset="debug").save_pretrained(str(directory))
    return directory


def test_an_absurd_window_in_config_json_is_refused_before_allocating(model_dir, tmp_path):
    import shutil

    shutil.copytree(model_dir, tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    meta["config"]["window"] = 10**9  # its attention ring would ask for ~128 GB
    (tmp_path / "m" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="window must be an integer in"):
        load_model(tmp_path / "m")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:3", "gpu"])
def test_a_device_this_machine_lacks_is_one_line(model_dir, tmp_path, capsys, device):
    argv = ["--checkpoint", str(model_dir), "--device", device]
    assert main(["generate", *argv, "--prompt", "x"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["eval", *argv, "--task", "mqar", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "Traceback" not in err and not (tmp_path / "e").exists()


def test_an_eval_out_that_is_a_file_is_refused_before_the_evaluation(
    model_dir, tmp_path, capsys, monkeypatch
):
    from titans_atlas.cli import eval as command

    def never(*args, **kwargs):
        raise AssertionError("the evaluation ran before --out was checked")

    monkeypatch.setattr(command, "run_task", never)
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub"):
        argv = ["eval", "--checkpoint", str(model_dir), "--task", "mqar", "--out", str(out)]
        assert main(argv) == 2
        assert "--out" in capsys.readouterr().err
    assert (tmp_path / "f").read_text() == "x"


def test_a_full_disk_during_a_checkpoint_loses_nothing(tmp_path, capsys, monkeypatch):
    from titans_atlas.io import training as ckpt

    run = tmp_path / "run"
    assert main(train_argv(run)) == 0
    saved = [p for p in (run / "checkpoints").rglob("*") if p.is_file()]
    before = {p: hashlib.sha256(p.read_bytes()).digest() for p in saved}

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", full)
    assert main(train_argv(run, "--resume", "--steps", "2")) == 2
    err = capsys.readouterr().err
    assert "cannot write the checkpoint of step 2" in err and "--resume" in err
    assert "Traceback" not in err
    checkpoints = run / "checkpoints"
    assert [p.name for p in checkpoints.iterdir() if p.name.startswith(".tmp")] == []
    assert json.loads((checkpoints / "latest.json").read_text())["dir"] == "step_00000001"
    for path, digest in before.items():  # every checkpoint file as it was
        assert hashlib.sha256(path.read_bytes()).digest() == digest, path


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A run whose checkpoint holds sharded weights only (DDP in a world of one)."""
    if not torch.distributed.is_available():
        pytest.skip("torch built without torch.distributed")
    run = tmp_path_factory.mktemp("sharded") / "run"
    argv = train_argv(run, "--set=train.strategy=ddp", "--set=train.export_model=false")
    assert main(argv) == 0
    return run


def _rehash(step: Path) -> None:
    """A manifest that matches the (damaged) files: only DCP's reading can fail."""
    files = [p for p in sorted(step.rglob("*")) if p.is_file() and p.name != "manifest.json"]
    manifest = {
        str(p.relative_to(step)): {
            "bytes": p.stat().st_size,
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
        }
        for p in files
    }
    (step / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage, message",
    [
        ("empty", "holds no shard files"),
        ("corrupt", "is unreadable"),
        ("foreign", "cannot read the sharded"),
    ],
)
def test_consolidate_on_empty_or_corrupt_shards_is_one_line(
    sharded, tmp_path, capsys, damage, message
):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sharded, run)
    step = run / "checkpoints" / "step_00000001"
    shard = next((step / "shards").glob("*.safetensors"))
    if damage == "empty":
        shard.unlink()
    elif damage == "corrupt":
        shard.write_bytes(b"\xff" * 100)
    else:  # a readable safetensors file that holds none of the model's tensors
        from safetensors.torch import save_file

        save_file({"x": torch.zeros(1)}, str(shard))
    _rehash(step)
    assert main(["consolidate", str(run)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (step / "model").exists()


def test_consolidate_refuses_an_out_that_is_a_file(sharded, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["consolidate", str(sharded), "--out", str(tmp_path / "f")]) == 2
    assert "--out" in capsys.readouterr().err and (tmp_path / "f").read_text() == "x"


def test_hub_lookups_say_they_are_using_the_network(monkeypatch, capsys):
    transformers = pytest.importorskip("transformers")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unreachable)
    from titans_atlas.tokenizers import load_tokenizer

    with pytest.raises(ValueError, match="no-such-org/no-such-tokenizer"):
        load_tokenizer("hf:no-such-org/no-such-tokenizer")
    assert "asking the Hugging Face hub" in capsys.readouterr().err
