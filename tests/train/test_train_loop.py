"""The loop: golden loss curve, exact resume (in process, packed and stream), non-finite
stop, atomic and verified checkpoints, and the model directory behind any run path."""

import json
import math
from pathlib import Path

import pytest
import torch
from train_helpers import debug_config

import titans_atlas as ta
from helpers import CountSyncs
from titans_atlas.io import CheckpointError
from titans_atlas.io import training as ckpt
from titans_atlas.ops.checks import Faults
from titans_atlas.train import NonFiniteError, Trainer, resolve_model_dir, train
from titans_atlas.train.diagnostics import check_finite
from titans_atlas.train.optim import parameter_groups
from titans_atlas.train.runtime import memory_state_norms

GOLDEN = Path(__file__).resolve().parents[1] / "assets" / "losses" / "debug_cpu.txt"
TOLERANCE = 0.02  # absolute, in nats: exact on one machine; absorbs BLAS differences elsewhere


def golden_run(out_dir):
    return train(debug_config(out_dir, train__eval_every=1000, train__checkpoint_every=1000))


def test_golden_loss_curve_of_the_debug_preset(tmp_path):
    """Regenerate with: PYTHONPATH=src:tests:tests/train python tests/train/test_train_loop.py"""
    expected = {
        int(s): float(v)
        for s, v in (ln.split() for ln in GOLDEN.read_text().splitlines() if ln[0] != "#")
    }
    losses = golden_run(tmp_path).losses
    for step, loss in expected.items():
        assert abs(losses[step] - loss) < TOLERANCE, (step, losses[step], loss)
    assert losses[1] > 5.0 and losses[40] < 3.8  # from ~ln 256 it learns the byte statistics


def test_resume_continues_bit_identically_in_stream_mode(tmp_path):
    overrides = {"data__mode": "stream", "train__steps": 12, "train__checkpoint_every": 6}
    straight = train(debug_config(tmp_path / "a", **overrides)).losses
    train(debug_config(tmp_path / "b", **{**overrides, "train__steps": 6}))
    resumed = train(debug_config(tmp_path / "b", **overrides), resume=True).losses
    assert [resumed[s] for s in range(7, 13)] == [straight[s] for s in range(7, 13)]


def test_resume_refuses_another_config(tmp_path):
    train(debug_config(tmp_path, train__steps=2))
    with pytest.raises(CheckpointError, match=r"model\.overrides"):
        Trainer(debug_config(tmp_path, train__steps=4, model__dim=48), resume=True)
    Trainer(debug_config(tmp_path, train__steps=4, train__log_every=1), resume=True)  # allowed


def test_resume_continues_the_checkpoints_model_when_a_default_moved(tmp_path, monkeypatch):
    """A run written before a preset's default moved (here: its inner step bound) resumes as
    it was trained: the checkpoint's model, bit-identically, with a line saying what moved."""
    from titans_atlas.models import registry

    name = debug_config(tmp_path).model.name
    cls, defaults = registry.MODELS[name]
    earlier = {**defaults, "memory": {**defaults.get("memory", {}), "lr_max": 0.05}}
    overrides = {"train__steps": 4, "train__checkpoint_every": 2}
    monkeypatch.setitem(registry.MODELS, name, (cls, earlier))
    straight = train(debug_config(tmp_path / "a", **overrides)).losses
    train(debug_config(tmp_path / "b", **{**overrides, "train__steps": 2}))
    monkeypatch.setitem(registry.MODELS, name, (cls, defaults))  # the default moves
    trainer = Trainer(debug_config(tmp_path / "b", **overrides), resume=True)
    assert trainer.model.config.memory.lr_max == 0.05
    assert all(m.config.lr_max == 0.05 for m in trainer.model.modules() if hasattr(m, "to_gates"))
    resumed = trainer.run().losses
    assert [resumed[s] for s in (3, 4)] == [straight[s] for s in (3, 4)]


def test_non_finite_parameter_stops_with_its_name_and_step(tmp_path):
    trainer = Trainer(debug_config(tmp_path, train__steps=3))
    trainer.train_step()
    with torch.no_grad():
        trainer.model.blocks[1].memory.to_gates.weight[0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"step 2.*blocks\.1\.memory\.to_gates\.weight"):
        trainer.train_step()
    assert not (tmp_path / "checkpoints").exists()


def test_the_finite_check_of_a_step_syncs_once_not_per_parameter(tmp_path):
    trainer = Trainer(debug_config(tmp_path, train__steps=3))
    trainer.train_step()
    with CountSyncs() as syncs:
        check_finite(trainer.model, trainer.parallel, 2, 1.0)
    assert syncs.count == 1 < len(list(trainer.model.parameters()))
    with torch.no_grad():
        next(trainer.model.parameters()).grad[0] = float("nan")
    with pytest.raises(NonFiniteError, match="non-finite gradients: \\['embed"):
        check_finite(trainer.model, trainer.parallel, 2, 1.0)


def test_a_diverged_carried_memory_is_named_with_the_step(tmp_path):
    trainer = Trainer(debug_config(tmp_path, data__mode="stream", train__steps=3))
    trainer.train_step()
    from titans_atlas.ops.state import map_tensors

    trainer.carried = map_tensors(trainer.carried, lambda t: t * float("inf"))
    with pytest.raises(NonFiniteError, match=r"step 2: loss nan.*carried into the step: \[inf"):
        trainer.train_step()
    assert trainer.step == 1 and math.isinf(memory_state_norms(trainer.carried)[0])


def test_a_training_step_reads_no_memory_value_checks(tmp_path, monkeypatch):
    """The memory layers' per-call NaN checks (a host sync per scan call: per segment for MAC)
    are off inside a step, whose own finite check covers them; on outside it."""
    trainer = Trainer(debug_config(tmp_path, data__mode="stream", train__steps=3))
    reads = []
    monkeypatch.setattr(Faults, "raise_first", lambda faults: reads.append(len(faults.flags)))
    trainer.train_step()
    assert reads == []
    trainer.model(torch.zeros(2, 64, dtype=torch.long))
    assert len(reads) >= 2 and min(reads) > 0


@pytest.mark.parametrize("mode", ["packed", "stream"])
def test_activation_checkpointing_recomputes_the_same_graph(tmp_path, mode):
    """The recompute inside backward makes the forward's value-check choice again (a step
    turns them off); a different choice records another graph, which checkpoint refuses."""
    overrides = {"data__mode": mode, "train__steps": 2}
    plain = Trainer(debug_config(tmp_path / "plain", **overrides))
    recomputed = Trainer(
        debug_config(tmp_path / "ckpt", train__activation_checkpoint=True, **overrides)
    )
    for _ in range(2):
        expected, got = plain.train_step(), recomputed.train_step()
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)


def test_crash_mid_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(debug_config(tmp_path, train__steps=3))
    trainer.train_step()
    first = trainer.save()
    trainer.train_step()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_state", crash)
    trainer.carried = object()  # forces the stream-state write, which now fails
    with pytest.raises(OSError):
        trainer.save()
    assert ckpt.find_checkpoint(tmp_path) == first
    Trainer(debug_config(tmp_path, train__steps=3), resume=True)  # loads the step-1 checkpoint


def test_corrupt_or_truncated_checkpoint_is_a_clear_error(tmp_path):
    train(debug_config(tmp_path, train__steps=2))
    directory = ckpt.find_checkpoint(tmp_path)
    weights = directory / "optimizer.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        Trainer(debug_config(tmp_path, train__steps=4), resume=True)
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CheckpointError, match="corrupt"):
        Trainer(debug_config(tmp_path, train__steps=4), resume=True)


def test_keep_last_best_and_model_dir_resolution(tmp_path):
    result = train(
        debug_config(tmp_path, train__steps=6, train__checkpoint_every=1, train__eval_every=3)
    )
    steps = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    best = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert set(steps) == {"step_00000005", "step_00000006", best["dir"]}
    assert resolve_model_dir(tmp_path) == result.checkpoint / "model"
    assert resolve_model_dir(tmp_path, "best").parent.name == best["dir"]
    assert resolve_model_dir(result.checkpoint) == result.checkpoint / "model"
    model_dir = resolve_model_dir(tmp_path)
    assert resolve_model_dir(model_dir) == model_dir
    assert ta.load_model(model_dir).config.name == "lmm"
    with pytest.raises(CheckpointError):
        resolve_model_dir(tmp_path / "nowhere")


def test_metrics_log_gates_state_norms_and_evaluations(tmp_path):
    train(debug_config(tmp_path, train__steps=10, train__eval_every=5))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "val_bpb" in r]
    assert [r["step"] for r in steps] == [5, 10] and [r["step"] for r in evals] == [5, 10]
    layer = steps[0]["memory"][0]
    assert set(layer) == {"lr", "momentum", "decay", "state_norm"}
    assert 0 < layer["lr"] < 0.1 and 0 < layer["momentum"] < 1 and layer["state_norm"] > 0
    assert steps[0]["tokens_per_s"] > 0 and steps[0]["grad_norm"] > 0


def test_no_weight_decay_on_norms_biases_gates_initial_weights_persistent_tokens():
    model = ta.create_model("mac", vocab_size=64, dim=32, depth=1, num_heads=2, window=8)
    decayed, kept = parameter_groups(model, 0.1)
    for name in kept["names"]:
        assert any(
            k in name for k in ("norm", "bias", "to_gates", "initial_weights", "persistent", "conv")
        )
    for name in decayed["names"]:
        assert "norm" not in name and "initial_weights" not in name and "to_gates" not in name
    assert {"embed.weight", "blocks.0.attn.to_qkv.weight"} <= set(decayed["names"])


def test_task_source_trains_and_reports_accuracy(tmp_path):
    result = train(
        debug_config(
            tmp_path,
            data__source="task:kv_recall",
            data__task_args={"num_pairs": 2},
            train__steps=4,
        )
    )
    assert "val_accuracy" in result.eval and "val_bpb" not in result.eval


if __name__ == "__main__":  # regenerate the golden curve
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        losses = golden_run(Path(tmp)).losses
    lines = ["# debug preset, CPU fp32, 1 thread: step loss (tests/train/test_train_loop.py)"]
    lines += [f"{step} {losses[step]:.6f}" for step in (1, 2, 5, 10, 15, 20, 25, 30, 35, 40)]
    GOLDEN.write_text("\n".join(lines) + "\n")
    print(GOLDEN.read_text())
