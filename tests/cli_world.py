"""A small world of files for the command-line tables (tests/test_cli_table.py): a finished
run, model directories, shards (complete and interrupted), text that is and is not UTF-8,
config files with bad values, hostile pointers and state files -- and the means to run one
`titans` command on it and see what it printed, under which exception, and what it changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from titans_atlas import create_model
from titans_atlas.cli import main

QUIET = ["--set=train.threads=1", "--set=train.progress=false", "--set=train.sample_tokens=0"]
TINY = ["--set=train.eval_tokens=256", "--set=train.batch_size=2", "--set=train.seq_len=32"]


def train_argv(out: Path, *extra: str) -> list[str]:
    """A one-step debug run into ``out``."""
    return ["train", "--preset", "debug", "--out", str(out), "--steps", "1", *QUIET, *TINY, *extra]


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the SHA-256 of its bytes ("dir" for a folder)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() and not p.is_symlink()
        else "dir"
        for p in sorted(root.rglob("*"))
    }


class Recorder(io.StringIO):
    """A stand-in for stderr that also records which exception was being handled when each
    message was written: the class of the error behind a command's one-line message."""

    def __init__(self) -> None:
        super().__init__()
        self.classes: list[type[BaseException]] = []

    def write(self, text: str) -> int:
        handled = sys.exc_info()[0]
        if handled is not None and handled not in self.classes:
            self.classes.append(handled)
        return super().write(text)


@dataclass
class Outcome:
    code: int  # the exit status (argparse's usage errors exit 2)
    err: str
    classes: list[type[BaseException]] = field(default_factory=list)


def run_titans(argv: list[str], monkeypatch) -> Outcome:
    """``titans ARGV`` in this process, stdout dropped, stderr recorded."""
    recorder = Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        monkeypatch.undo()
    return Outcome(code, recorder.getvalue(), recorder.classes)


def build_world(root: Path) -> dict[str, Path]:
    """The files the tables name, by placeholder."""
    paths = {name: root / name for name in (
        "run", "model", "model64", "shards", "partial", "binary", "afile", "adir",
        "steps.toml", "nan.json", "hostile", "sharded", "empty", "bad.jsonl", "new",
        "deep.json", "tok.json", "model_ids", "model_hf", "nospec",
    )}  # fmt: skip
    paths |= {"text": root / "text.txt", "latin1": root / "latin1.txt"}
    paths["state"] = root / "main_state.safetensors"
    assert main(train_argv(paths["run"])) == 0
    create_model("lmm", preset="debug").save_pretrained(str(paths["model"]))
    (paths["model"] / "tokenizer_spec.json").write_text('{"kind": "bytes"}\n')
    create_model("lmm", preset="debug", vocab_size=64).save_pretrained(str(paths["model64"]))
    paths["text"].write_text("to be or not to be, that is the question\n" * 20)
    paths["latin1"].write_bytes("café crème\n".encode("latin-1") * 20)
    paths["binary"].mkdir()
    (paths["binary"] / "a.txt").write_text("plain words " * 30)
    (paths["binary"] / "b.dat").write_bytes(b"\x7fELF\x02\x01\x01\x00" * 16)
    assert main(["prepare", str(paths["text"]), "--out", str(paths["shards"])]) == 0
    shutil.copytree(paths["shards"], paths["partial"])
    (paths["partial"] / "meta.json").unlink()  # a prepare killed before its last write
    paths["afile"].write_text("not a folder\n")
    paths["adir"].mkdir()
    paths["empty"].mkdir()
    paths["steps.toml"].write_text("[train]\nsteps = 3.5\n")
    paths["nan.json"].write_text('{"optim": {"lr": NaN}}\n')
    paths["bad.jsonl"].write_text('{"text": "fine"}\n{"text": \n')
    paths["deep.json"].write_text("[" * 100_000 + "]" * 100_000)  # deeper than json recurses
    paths["tok.json"].write_text("{not a tokenizer")
    shutil.copytree(paths["model"], paths["model_ids"])  # a spec with more ids than the model
    (paths["model_ids"] / "tokenizer_spec.json").write_text('{"kind": "ids", "vocab_size": 999}')
    shutil.copytree(paths["model"], paths["model_hf"])  # a spec whose tokenizer.json is gone
    (paths["model_hf"] / "tokenizer_spec.json").write_text('{"kind": "hf", "source": ""}')
    shutil.copytree(paths["shards"], paths["nospec"])
    (paths["nospec"] / "tokenizer_spec.json").unlink()
    shutil.copytree(paths["run"], paths["hostile"])
    for name in ("latest.json", "best.json"):
        pointer = {"step": 1, "dir": "../../run/checkpoints/step_00000001"}
        (paths["hostile"] / "checkpoints" / name).write_text(json.dumps(pointer))
    structure = {"dataclass": "titans_atlas.__main__:ModelState", "fields": {}}
    meta = {"format": "titans-atlas-state", "structure": json.dumps(structure)}
    save_file({"t0": torch.zeros(1)}, str(paths["state"]), meta)
    if torch.distributed.is_available():
        sharded = ["--set=train.strategy=ddp", "--set=train.export_model=false"]
        assert main(train_argv(paths["sharded"], *sharded)) == 0
    return paths
