"""``train.compile = "auto"`` (the default) and the fallback to eager: a short run stays eager
and says why, a run long enough to pay compiles, and a compile that raises -- in the forward
or only in the backward -- costs one line and nothing else: the losses are the eager run's,
bit for bit, because the failed step is redone on the same micro-batches."""

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


def test_a_short_run_stays_eager_and_says_why(tmp_path, capsys):
    trainer, _ = run(tmp_path, "auto")  # "auto" is the default
    assert trainer.config.train.compile == "auto"
    assert not trainer.compile_choice.use and not trainer.compile_choice.pending
    assert trainer.forward is trainer.eager_forward
    reason = trainer.compile_choice.reason
    assert reason.startswith("auto: eager") and "steps would take" in reason
    assert "compile: auto: eager" in capsys.readouterr().err


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


def test_auto_compiles_when_the_rest_of_the_run_pays(tmp_path, monkeypatch, capsys):
    """With the pay-off threshold at 0 s every run pays: "auto" compiles after its probe
    steps (here a compiler that fails, so the run also shows the fallback after "auto")."""
    _, eager = run(tmp_path, "eager", train__compile=False)
    monkeypatch.setattr(compiling, "TRAIN_PAYS_AFTER_S", 0.0)
    monkeypatch.setattr(train_loop.torch, "compile", broken_compile("forward"))
    _, losses = run(tmp_path, "auto")
    assert losses == eager
    err = capsys.readouterr().err
    assert "compile: auto: compiling; the remaining 2 steps" in err
    assert "torch.compile failed" in err


def test_auto_stays_eager_where_compile_cannot_work(tmp_path, monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    trainer = Trainer(debug_config(tmp_path / "run", **STEPS))
    choice = trainer.compile_choice
    assert not choice.use and not choice.pending and "no C++ compiler" in choice.reason


def test_decide_projects_the_remaining_eager_time():
    choice = compiling.TrainCompileChoice.start("auto", "cpu")
    if not choice.pending:
        pytest.skip(choice.reason)  # no compiler on this machine
    assert choice.decide(step_seconds=1.0, steps_left=1000) is True  # 1,000 s >= 600 s
    assert "~1000 s" in choice.reason
    assert choice.decide(step_seconds=0.5, steps_left=100) is False  # 50 s
    assert compiling.TrainCompileChoice.start(False, "cpu").reason == "train.compile=false"
    assert compiling.TrainCompileChoice.start(True, "cpu").use


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
