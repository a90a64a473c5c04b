"""``titans eval``: a saved model in, a JSON result (config, weights hash, per-sample
outcomes) and a PNG out; bad input is an error message, not a traceback."""

import hashlib
import json

import pytest

from titans_atlas import create_model
from titans_atlas.cli import main
from titans_atlas.cli.eval import parse_length


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt")
    create_model("swa", preset="debug").save_pretrained(str(directory))
    return directory


def test_parse_length():
    assert [parse_length(t) for t in ("300", "1K", "64k", "1M")] == [300, 1024, 65536, 1 << 20]


def test_eval_writes_json_with_hash_and_outcomes_and_a_plot(checkpoint, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question.\n" * 40)
    out = tmp_path / "out"
    code = main(
        [
            "eval",
            "--checkpoint",
            str(checkpoint),
            "--task",
            "perplexity",
            "--text",
            str(text),
            "--lengths",
            "1K",
            "--out",
            str(out),
            "--threads",
            "1",
        ]
    )
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "perplexity.json").read_text())
    weights = (checkpoint / "model.safetensors").read_bytes()
    assert result["checkpoint"]["sha256"] == hashlib.sha256(weights).hexdigest()
    assert result["checkpoint"]["model"]["name"] == "swa"
    assert result["settings"]["lengths"] == [1024] and result["summary"]["tokens"] == 1023
    assert result["samples"][0]["curve"]
    assert (out / "perplexity.png").stat().st_size > 1000


def test_eval_kv_recall_records_each_sample(checkpoint, tmp_path):
    pytest.importorskip("matplotlib")
    code = main(
        [
            "eval",
            "--checkpoint",
            str(checkpoint),
            "--task",
            "kv-recall",
            "--distances",
            "8",
            "40",
            "--samples",
            "3",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "kv-recall.json").read_text())
    assert len(result["samples"]) == 6 and {s["score"] for s in result["samples"]} <= {0.0, 1.0}
    assert result["summary"]["window"] == 32


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--task", "perplexity"], "--text"),
        (["--task", "perplexity", "--text", "/no/such/file.txt"], "does not exist"),
        (["--task", "babilong-style"], "--babi-dir"),
        (["--task", "sniah-n", "--lengths", "512"], "haystack_dir"),
    ],
)
def test_missing_inputs_are_errors_naming_what_to_give(
    checkpoint, tmp_path, capsys, extra, message
):
    pytest.importorskip("wonderwords")
    assert main(["eval", "--checkpoint", str(checkpoint), "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_not_a_checkpoint_is_an_error(tmp_path, capsys):
    assert main(["eval", "--checkpoint", str(tmp_path), "--task", "mqar"]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_importing_the_library_and_the_cli_loads_no_optional_dependency():
    import subprocess
    import sys

    code = (
        "import sys, titans_atlas, titans_atlas.eval\n"
        "from titans_atlas.cli import build_parser; build_parser()\n"
        "heavy = {'matplotlib', 'nltk', 'wonderwords', 'datasets', 'lm_eval', 'pandas'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
