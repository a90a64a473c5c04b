"""`titans eval` refuses an impossible length before it builds anything, and says how far a
long evaluation has got (issue 37)."""

import dataclasses
import time

import pytest

from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.eval import registry
from titans_atlas.eval.registry import MAX_EVAL_LENGTH, EvalSettings, run_task
from titans_atlas.memory_estimate import inference as eval_memory


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt")
    create_model("lmm", preset="debug").save_pretrained(str(directory))
    return directory


@pytest.mark.parametrize("length", ["100000000", "1000M", str(MAX_EVAL_LENGTH + 1)])
def test_a_huge_length_is_refused_at_once(checkpoint, tmp_path, capsys, length):
    start = time.perf_counter()
    argv = ["eval", "--checkpoint", str(checkpoint), "--task", "passkey", "--lengths", length]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert time.perf_counter() - start < 10  # it used to build a 2.7 GB prompt first
    err = capsys.readouterr().err
    assert "lengths" in err and str(MAX_EVAL_LENGTH) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_prompt_memory_is_checked_before_the_first_sample_is_built(checkpoint, monkeypatch):
    from titans_atlas.io import load_model
    from titans_atlas.tokenizers import load_tokenizer

    def never(*args, **kwargs):
        raise AssertionError("a sample was built before the memory check")

    monkeypatch.setattr(eval_memory, "available_memory", lambda device="cpu": 1 << 20)
    passkey = dataclasses.replace(registry.TASKS["passkey"], samples=never)
    monkeypatch.setitem(registry.TASKS, "passkey", passkey)
    settings = EvalSettings(lengths=(65536,))
    with pytest.raises(eval_memory.MemoryBudgetError, match="65600 tokens"):
        run_task("passkey", load_model(checkpoint), load_tokenizer(), settings)


def test_progress_lines_name_each_sample(checkpoint, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    argv = ["eval", "--checkpoint", str(checkpoint), "--task", "mqar", "--lengths", "64"]
    assert main([*argv, "--samples", "2", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "sample 1 (length 64, kv_pairs 4)" in err and "sample 2" in err


def test_mqar_lengths_are_checked_before_the_first_sample(checkpoint, tmp_path, capsys):
    """A length at or above the vocabulary used to fail after the shorter ones had run."""
    pytest.importorskip("matplotlib")
    argv = ["eval", "--checkpoint", str(checkpoint), "--task", "mqar", "--samples", "1"]
    assert main([*argv, "--lengths", "64", "256", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "--lengths 256" in err and "sample 1" not in err
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0  # the defaults that fit: 64, 128
    assert "sample 2 (length 128" in capsys.readouterr().err
