"""``train.compile = "auto"`` (the default) and the fallback to eager: a short run stays eager
and says why, a run with enough steps left to pay compiles, and a compile that raises -- in
the forward or only in the backward -- costs one line and nothing else: the losses are the
eager run's, bit for bit, because the failed step is redone on the same micro-batches."""

import pytest
import torch
from train_helpers import debug_config

from titans_atlas import compiling
from titans_atlas.train import Trainer
from titans_atlas.train import loop as train_loop

STEPS = {"train__steps": 4, "train__eval_every": 0, "train__checkpoint_every": 0}


class _FailsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward compile failed (a fake inductor error)")


def broken_compile(where: str):
    """A stand-in for ``torch.compile`` whose result fails the way a compiler does: on the
    first call (``forward``) or when its backward graph is compiled (``backward``)."""

    def fake(module, **options):
        def compiled(*args, **kwargs):
            if where == "forward":
                raise RuntimeError("InductorError: no working C++ compiler (a fake)")
            logits, state = module(*args, **kwargs)
            return _FailsInBackward.apply(logits), state

        return compiled

    return fake


def run(tmp_path, name, **overrides):
    trainer = Trainer(debug_config(tmp_path / name, **{**STEPS, **overrides}))
    return trainer, trainer.run().losses


def test_a_short_run_stays_eager_and_says_why(tmp_path):
    trainer, _ = run(tmp_path, "auto")  # "auto" is the default
    assert trainer.config.train.compile == "auto"
    assert not trainer.compile_choice.use and trainer.forward is trainer.eager_forward
    reason = trainer.compile_choice.reason
    if "C++" not in reason:
        assert reason == "auto: eager, 4 steps to go (compiling pays from ~3000)"


@pytest.mark.parametrize("where", ["forward", "backward"])
@pytest.mark.parametrize("mode", ["packed", "stream"])
def test_a_failing_compile_falls_back_to_the_eager_losses(tmp_path, monkeypatch, capsys, where,
                                                          mode):  # fmt: skip
    _, eager = run(tmp_path, "eager", train__compile=False, data__mode=mode)
    monkeypatch.setattr(train_loop.torch, "compile", broken_compile(where))
    trainer, losses = run(tmp_path, "broken", train__compile=True, data__mode=mode)
    assert losses == eager  # the failed step was redone on the same batches, nothing leaked
    assert trainer.forward is trainer.eager_forward
    assert trainer.compile_choice.reason == "compile failed: eager"
    err = capsys.readouterr().err
    assert err.count("torch.compile failed (RuntimeError") == 1 and "continuing eager" in err


def test_auto_compiles_when_enough_steps_are_left(tmp_path, monkeypatch, capsys):
    """With the pay-off at 1 step every run pays: "auto" compiles from the first step (here
    with a compiler that fails, so the run also shows the fallback after "auto")."""
    _, eager = run(tmp_path, "eager", train__compile=False)
    monkeypatch.setattr(compiling, "TRAIN_PAYS_AFTER_STEPS", 1)
    monkeypatch.setattr(compiling, "compile_unavailable", lambda device: None)
    monkeypatch.setattr(train_loop.torch, "compile", broken_compile("forward"))
    trainer, losses = run(tmp_path, "auto")
    assert losses == eager
    assert "torch.compile failed" in capsys.readouterr().err
    assert trainer.compile_choice.reason == "compile failed: eager"


def test_auto_counts_the_steps_left_after_a_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(compiling, "TRAIN_PAYS_AFTER_STEPS", 3)
    monkeypatch.setattr(compiling, "compile_unavailable", lambda device: None)
    config = debug_config(tmp_path / "run", **{**STEPS, "train__checkpoint_every": 2})
    with monkeypatch.context() as patch:  # a fresh run of 4 steps: 4 >= 3, compiled
        patch.setattr(train_loop.torch, "compile", lambda module, **options: module)
        first = Trainer(config)
        assert first.compile_choice.use
        first.run()
    resumed = Trainer(config, resume=str(tmp_path / "run/checkpoints/step_00000002"))
    assert not resumed.compile_choice.use  # 2 steps left
    assert resumed.compile_choice.reason.startswith("auto: eager, 2 steps to go")


def test_auto_stays_eager_where_compile_cannot_work(tmp_path, monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    trainer = Trainer(debug_config(tmp_path / "run", **STEPS))
    choice = trainer.compile_choice
    assert not choice.use and "no C++ compiler" in choice.reason


def test_decide_from_the_setting_the_platform_and_the_steps_left():
    decide = compiling.TrainCompileChoice.decide
    assert decide(False, "cpu", 10**6).reason == "train.compile=false"
    assert decide(True, "cpu", 1).use  # asked for: tried, with the fallback
    if compiling.compile_unavailable("cpu") is None:
        assert decide("auto", "cpu", 3000).use and not decide("auto", "cpu", 2999).use
    assert not decide("auto", "mps", 10**6).use  # not a platform auto compiles on
    assert "CPU and CUDA only" in decide("auto", "mps", 10**6).reason


@pytest.mark.parametrize(
    "value, expected",
    [
        ("auto", "auto"),
        ("TRUE", True),
        ("on", True),
        ("false", False),
        (True, True),
        (False, False),
    ],
)
def test_compile_settings(value, expected):
    assert compiling.check_compile_setting("train.compile", value) == expected


@pytest.mark.parametrize("value", ["sometimes", 1, None, 0.5])
def test_compile_settings_refused_by_name(value):
    with pytest.raises(ValueError, match=r"train\.compile must be auto, true or false"):
        compiling.check_compile_setting("train.compile", value)
