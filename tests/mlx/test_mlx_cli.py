"""`--backend mlx` for `titans generate` and `titans eval`: the same checkpoint gives the
same greedy text and the same perplexity as the torch backend; torch-only options are named."""

import json

import pytest
import torch

pytest.importorskip("mlx.core")

import titans_atlas as ta
from titans_atlas.cli import main


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = ta.create_model(
        "mag", vocab_size=256, dim=32, depth=2, num_heads=2, window=8, chunk_size=8
    )
    with torch.no_grad():  # a sharper distribution than an untrained model's, so ties are rare
        model.embed.weight.mul_(8.0)
    directory = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(directory)
    return directory


def generated(checkpoint, backend, capsys):
    args = ["generate", "--checkpoint", str(checkpoint), "--prompt", "To be, or not",
            "--greedy", "--max-new-tokens", "24", "--backend", backend]  # fmt: skip
    assert main(args) == 0
    return capsys.readouterr().out


def test_greedy_generation_is_the_same_text(checkpoint, capsys):
    assert generated(checkpoint, "mlx", capsys) == generated(checkpoint, "torch", capsys)


def test_perplexity_is_the_same_number(checkpoint, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("Now is the winter of our discontent made glorious summer. " * 40)
    numbers = {}
    for backend in ("torch", "mlx"):
        args = ["eval", "--checkpoint", str(checkpoint), "--task", "perplexity", "--text",
                str(text), "--lengths", "700", "--backend", backend, "--out",
                str(tmp_path / backend)]  # fmt: skip
        assert main(args) == 0
        result = json.loads((tmp_path / backend / "perplexity.json").read_text())
        numbers[backend] = result["summary"]["bits_per_byte"]
    capsys.readouterr()
    assert numbers["mlx"] == pytest.approx(numbers["torch"], rel=1e-5)


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--save-state", "s.pt"], "--save-state"), (["--quantize", "int8"], "--quantize int8")],
)
def test_torch_only_options_are_refused_by_name(checkpoint, capsys, extra, named):
    args = ["generate", "--checkpoint", str(checkpoint), "--prompt", "x", "--backend", "mlx"]
    assert main([*args, *extra]) == 2
    assert named in capsys.readouterr().err
