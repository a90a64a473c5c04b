"""Bad training-task arguments and BABILong-style inputs (fuzzing review): each is refused
up front with one line naming the argument or file and what is valid -- no TypeError from
the first batch, no half-made run folder, no prompt stored at a length it does not have."""

from pathlib import Path

import pytest
import torch

from helpers import BABI_STORY, write_babi_and_books, write_babi_qa1
from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.eval import EvalSettings
from titans_atlas.eval.registry import get_task
from titans_atlas.tasks import make_task
from titans_atlas.tasks.babi import babi_file, parse_babi
from titans_atlas.tokenizers import ByteTokenizer

QUIET = ["--set=train.threads=1", "--set=train.progress=false", "--set=train.sample_tokens=0"]
TINY = ["--set=train.eval_tokens=64", "--set=train.batch_size=2", "--set=train.seq_len=32"]

BAD = [
    ("kv_recall", "num_pairs", 2.5),
    ("kv_recall", "num_pairs", True),
    ("kv_recall", "num_pairs", "4"),
    ("kv_recall", "distance", 2.5),
    ("kv_recall", "num_fillers", -1),
    ("kv_recall", "num_keys", None),
    ("kv_distance", "max_distance", 1.5),
    ("kv_distance", "min_distance", 0),
    ("kv_distance", "vocab_size", "32"),
    ("kv_multi", "num_queries", 2.5),
    ("kv_multi", "num_pairs", False),
    ("kv_multi", "vocab_size", 32.0),
    ("kv_persistent", "new_pairs", 1.5),
    ("kv_persistent", "new_pairs", -1),
    ("kv_persistent", "num_queries", "all"),
]


def train_argv(out, *sets: str) -> list[str]:
    argv = ["train", "--preset", "debug", "--out", str(out), "--steps", "1", *QUIET, *TINY]
    return [*argv, *(f"--set={s}" for s in sets)]


@pytest.mark.parametrize(("task", "name", "value"), BAD)
def test_a_bad_task_argument_names_it(task, name, value):
    with pytest.raises(ValueError, match=rf"^data\.task_args\.{name} must be an integer >= \d"):
        make_task(task, 32, {name: value})


@pytest.mark.parametrize(
    ("task", "args", "word"),
    [
        ("kv_recall", {"distance": 100}, r"data\.task_args\.distance=100"),
        ("kv_distance", {"num_pairs": 20}, r"data\.task_args\.vocab_size"),
        ("kv_distance", {"num_pairs": 15, "vocab_size": 64}, r"at most 14 pairs"),
        ("kv_multi", {"layout": ["end"]}, r"data\.task_args\.layout"),
    ],
)
def test_arguments_that_would_fail_at_the_first_batch_are_refused_when_built(task, args, word):
    with pytest.raises(ValueError, match=word):
        make_task(task, 32, args)


@pytest.mark.parametrize(
    ("task", "args"),
    [
        ("kv_recall", {"num_pairs": 2, "distance": 17}),
        ("kv_recall", {"num_pairs": 4, "distance": None}),
        ("kv_distance", {"num_pairs": 14, "vocab_size": 64, "max_distance": None}),
        ("kv_multi", {"num_queries": 2}),
        ("kv_persistent", {"new_pairs": 2}),
    ],
)
def test_valid_arguments_still_sample(task, args):
    generator = torch.Generator().manual_seed(0)
    built = make_task(task, 32, args)
    for _ in range(20):
        inputs, labels = built.sample(2, generator)
        assert inputs.shape == labels.shape == (2, 32)


@pytest.mark.parametrize(
    ("task", "arg"),
    [
        ("kv_recall", "num_pairs=2.5"),
        ("kv_recall", "num_pairs=true"),
        ("kv_recall", 'num_pairs="4"'),
        ("kv_recall", "num_fillers=-1"),
        ("kv_distance", "max_distance=1.5"),
        ("kv_multi", "num_queries=2.5"),
        ("kv_persistent", "new_pairs=1.5"),
    ],
)
def test_titans_train_refuses_before_writing_the_run_folder(tmp_path, capsys, task, arg):
    out = tmp_path / "run"
    argv = train_argv(out, f"data.source=task:{task}", f"data.task_args.{arg}")
    assert main(argv) == 2
    err = capsys.readouterr().err
    name = arg.split("=")[0]
    assert f"data.task_args.{name}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_titans_train_runs_with_a_valid_value(tmp_path, capsys):
    out = tmp_path / "run"
    argv = train_argv(out, "data.source=task:kv_recall", "data.task_args.num_pairs=2")
    assert main(argv) == 0, capsys.readouterr().err
    assert (out / "run_config.json").exists()


# -- BABILong-style ---------------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path):
    pytest.importorskip("nltk")  # the books are cut into sentences with Punkt
    return write_babi_and_books(tmp_path, test=BABI_STORY, train=BABI_STORY)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt")
    create_model("swa", preset="debug").save_pretrained(str(directory))
    return directory


def style_settings(folders, **kwargs) -> EvalSettings:
    babi, books = folders
    return EvalSettings(
        babi_dir=str(babi), haystack_dir=str(books), babi_tasks=("qa1",), samples=2, **kwargs
    )


@pytest.mark.parametrize("length", [8, 256, 300, 414])
def test_babilong_style_refuses_a_length_without_room_for_the_facts(folders, length):
    samples = get_task("babilong-style").samples(
        style_settings(folders, lengths=(0, length)), ByteTokenizer()
    )
    with pytest.raises(ValueError, match=rf"^babilong-style --lengths {length} .*>= 415$"):
        next(iter(samples))  # before the first sample (the length-0 one) is built


def test_babilong_style_builds_the_lengths_it_reports(folders):
    tok = ByteTokenizer()
    settings = style_settings(folders, lengths=(0, 415, 512))
    samples = list(get_task("babilong-style").samples(settings, tok))
    assert [s["length"] for s in samples] == [0, 0, 415, 415, 512, 512]
    for sample in samples:
        if sample["length"]:  # the context is the length less the prompt reserve
            assert sample["context_tokens"] == sample["length"] - 300


def test_babilong_style_defaults_keep_the_lengths_that_fit(folders):
    samples = list(get_task("babilong-style").samples(style_settings(folders), ByteTokenizer()))
    assert sorted({s["length"] for s in samples}) == [0, 1024, 2048, 4096]


def test_titans_eval_babilong_style_short_length_is_one_line(folders, checkpoint, tmp_path, capsys):
    babi, books = folders
    out = tmp_path / "out"
    argv = ["eval", "--checkpoint", str(checkpoint), "--task", "babilong-style", "--out", str(out),
            "--babi-dir", str(babi), "--haystack-dir", str(books), "--babi-tasks", "qa1",
            "--lengths", "8"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--lengths" in err and ">= 415" in err and "Traceback" not in err
    assert not (out / "babilong-style.json").exists()


def test_an_empty_babi_file_is_an_error_naming_it(folders, checkpoint, tmp_path, capsys):
    _, books = folders
    empty = tmp_path / "empty"
    empty.mkdir()
    write_babi_qa1(empty, test="", train="\n")
    for split in ("test", "train"):
        with pytest.raises(
            ValueError, match=rf"qa1_single-supporting-fact_{split}\.txt.*no question"
        ):
            parse_babi(babi_file(empty, "qa1", split))
    argv = ["eval", "--checkpoint", str(checkpoint), "--task", "babilong-style", "--out",
            str(tmp_path / "out"), "--babi-dir", str(empty), "--haystack-dir", str(books),
            "--babi-tasks", "qa1", "--lengths", "0"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "qa1_single-supporting-fact_test.txt" in err and "no questions" in err
    with pytest.raises(ValueError, match="no questions"):  # training reads it when built
        make_task("babilong_style", 128, {"babi_dir": str(empty), "haystack_dir": str(books)})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"task": 1}, r"data\.task_args\.task must be a string"),
        ({"babi_dir": 5}, r"data\.task_args\.babi_dir must be a string"),
        ({"tokenizer": "byte"}, r"data\.task_args\.tokenizer must be a Tokenizer"),
    ],
)
def test_babilong_style_task_arguments_name_themselves(folders, args, message):
    babi, books = folders
    with pytest.raises(ValueError, match=message):
        make_task(
            "babilong_style", 128, {"babi_dir": str(babi), "haystack_dir": str(books), **args}
        )


@pytest.mark.parametrize("seq_len", [128.5, True, "128"])
def test_babilong_style_seq_len_must_be_an_integer(folders, seq_len):
    babi, books = folders
    with pytest.raises(ValueError, match=r"train\.seq_len must be an integer >= 64"):
        make_task("babilong_style", seq_len, {"babi_dir": str(babi), "haystack_dir": str(books)})


def test_babilong_style_defaults_are_chosen_per_task(folders):
    """A task with long facts drops the default lengths it cannot hold, not the others'."""
    babi = Path(__file__).resolve().parents[2] / "shared" / "data" / "babi" / "en-10k"
    if not babi.is_dir():
        pytest.skip("../shared/data/babi is not here")
    settings = EvalSettings(
        babi_dir=str(babi), haystack_dir=str(folders[1]), babi_tasks=("qa1", "qa3"), samples=1
    )
    samples = list(get_task("babilong-style").samples(settings, ByteTokenizer()))
    by_task = {t: sorted({s["length"] for s in samples if s["task"] == t}) for t in ("qa1", "qa3")}
    assert by_task["qa1"] == [0, 1024, 2048, 4096]
    assert 1024 not in by_task["qa3"] and 0 in by_task["qa3"]
