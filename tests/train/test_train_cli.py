"""`titans train` / `prepare` / `generate` as real processes: exact resume after SIGKILL,
SIGTERM writes a checkpoint, generation from the run, interactive turns, memory sessions."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import titans_atlas
from titans_atlas.cli import main

# Child processes import the package the tests import: src/ or an installed wheel.
SRC = str(Path(titans_atlas.__file__).resolve().parents[1])
QUIET = [
    "--set",
    "train.threads=1",
    "--set",
    "train.progress=false",
    "--set",
    "train.sample_tokens=0",
]


def titans(*args: str, **kwargs) -> list[str]:
    return [sys.executable, "-m", "titans_atlas", *args]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(
        titans(*args), input=stdin, capture_output=True, text=True, env=env(), timeout=300
    )
    if check and out.returncode != 0:
        raise AssertionError(f"{args} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out


def losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def latest_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]
    except (OSError, ValueError):
        return 0


def train_args(run_dir: Path, steps: int = 20) -> list[str]:
    sets = {
        "train.steps": steps,
        "train.checkpoint_every": 10,
        "train.log_every": 1,
        "train.eval_every": 1000,
    }
    return [
        "train",
        "--preset",
        "debug",
        "--out",
        str(run_dir),
        *QUIET,
        *(f"--set={k}={v}" for k, v in sets.items()),
    ]


def test_resume_after_sigkill_repeats_the_same_losses(tmp_path):
    run(*train_args(tmp_path / "straight"))
    killed = tmp_path / "killed"
    process = subprocess.Popen(titans(*train_args(killed)), env=env(), stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while latest_step(killed) < 10 and process.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert latest_step(killed) == 10, "the kill must land between the two checkpoints"
    run(*train_args(killed), "--resume")
    straight, resumed = losses(tmp_path / "straight"), losses(killed)
    assert [resumed[s] for s in range(1, 21)] == [straight[s] for s in range(1, 21)]


def test_sigterm_writes_a_checkpoint_and_exits_cleanly(tmp_path):
    # 100,000 steps would compile under "auto" (minutes of a first step): this is about signals
    args = [*train_args(tmp_path, steps=100000), "--set", "train.compile=false"]
    process = subprocess.Popen(titans(*args), env=env(), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "metrics.jsonl").is_file() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143 and "Traceback" not in stderr
    assert "SIGTERM" in stderr and latest_step(tmp_path) >= 1


def test_train_then_generate_interactive_and_memory_sessions(tmp_path, capsys, monkeypatch):
    sample = ["--set", "train.sample_tokens=16"]
    out = run(
        "train",
        "--preset",
        "debug",
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "4",
        *QUIET,
        *sample,
    )
    assert "bits per byte" in out.stdout and "sample:" in out.stdout

    def generate(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(
            [
                "generate",
                "--checkpoint",
                str(tmp_path / "run"),
                "--max-new-tokens",
                "12",
                "--seed",
                "0",
                *args,
            ]
        )
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    state = str(tmp_path / "s.safetensors")
    code, first, err = generate("--prompt", "HAMLET:", "--save-state", state)
    assert code == 0 and "(19 tokens)" in err  # 7 prompt bytes + 12 generated, all in the state
    assert generate("--prompt", "HAMLET:")[1] == first  # same seed, same text
    _, _, err = generate(
        "--prompt", "x", "--load-state", state, "--save-state", str(tmp_path / "t")
    )
    assert "(32 tokens)" in err  # the saved stream went on from 19
    _, chat, err = generate("--interactive", "--save-state", state, stdin="To be\nor not\n")
    assert chat.count("\n") == 2 and "(37 tokens)" in err  # (6 + 12) + (7 + 12): one stream
    # a line of undecodable bytes is skipped, not the end of the session and its state
    code, _, err = generate("--interactive", "--save-state", state, stdin="To be\n\udcff\nor not\n")
    assert code == 0 and "line 2 skipped" in err and "(37 tokens)" in err

    class InterruptedStdin(io.StringIO):  # Ctrl-C after the first turn
        def __iter__(self):
            yield "To be\n"
            raise KeyboardInterrupt

    monkeypatch.setattr(sys, "stdin", InterruptedStdin())
    code = main(["generate", "--checkpoint", str(tmp_path / "run"), "--max-new-tokens", "12",
                 "--interactive", "--save-state", state])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "interrupted" in err and "(18 tokens)" in err
    code, quantized, _ = generate("--prompt", "HAMLET:", "--quantize", "int8")
    assert code == 0 and quantized.strip()
    code = main(["generate", "--checkpoint", str(tmp_path / "nowhere"), "--prompt", "x"])
    assert code == 2 and "error:" in capsys.readouterr().err


def test_prepare_shards_then_train_in_stream_mode(tmp_path):
    (tmp_path / "books").mkdir()
    for i in range(3):
        (tmp_path / "books" / f"b{i}.txt").write_text(f"book {i} " * 400)
    out = run("prepare", str(tmp_path / "books"), "--out", str(tmp_path / "shards"))
    assert "3 documents" in out.stdout
    stream = ["--set", "data.mode=stream", "--set", "data.val_fraction=0.2"]
    data = ["--data", str(tmp_path / "shards"), "--out", str(tmp_path / "run")]
    run("train", "--preset", "debug", *data, "--steps", "3", *stream, *QUIET)
    assert latest_step(tmp_path / "run") == 3


def test_bad_settings_exit_2_with_the_field_named(tmp_path):
    out = run("train", "--preset", "debug", "--set", "train.stpes=3", check=False)
    assert out.returncode == 2 and "steps" in out.stderr and "Traceback" not in out.stderr


def test_data_too_small_to_validate_is_refused_before_step_one(tmp_path):
    # it used to train every step, then fail in the final evaluation without its checkpoint
    (tmp_path / "small.txt").write_text("To be, or not to be, that is the question. " * 16)
    data = ["--data", str(tmp_path / "small.txt"), "--out", str(tmp_path / "run")]
    out = run("train", "--preset", "debug", *data, "--steps", "2", *QUIET, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "data.val_fraction" in out.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["train", "prepare", "generate"])
def test_subcommands_are_registered(command):
    from titans_atlas.cli import build_parser

    assert command in build_parser().format_help()


def test_train_help_lists_every_preset():
    from titans_atlas.cli import build_parser
    from titans_atlas.train.config import RUN_PRESETS

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]  # the `train` subparser
    text = " ".join(train.format_help().split())
    assert all(name in text for name in RUN_PRESETS) and "recall" in text


def test_a_model_too_large_for_memory_is_a_clear_error_not_a_traceback(
    tmp_path, monkeypatch, capsys
):
    import titans_atlas.cli.train as cli_train

    def allocate(*args, **kwargs):  # what the CPU allocator raises for model.dim=65536
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 5e10 bytes"
        )

    monkeypatch.setattr(cli_train, "Trainer", allocate)
    assert main(["train", "--preset", "debug", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and "model.dim" in err

    def bug(*args, **kwargs):  # any other RuntimeError is a bug: it keeps its traceback
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(cli_train, "Trainer", bug)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["train", "--preset", "debug", "--out", str(tmp_path / "run")])
