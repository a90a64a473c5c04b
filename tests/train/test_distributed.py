"""Distributed training with real processes: torchrun (``python -m torch.distributed.run
--standalone``) starts 2 gloo ranks on CPU that run ``dist_worker.py``; the references and
the 1-process resumes run here, in this process, without a process group.

What must hold, for DDP and FSDP2, packed and stream mode, with 2 micro-batches per step:
2 ranks x 2 rows give the losses, evaluation and final weights of 1 process x 4 rows; a
step reduces gradients once, not once per micro-batch; a sharded checkpoint resumes in 1
and in 2 processes (and a 1-process checkpoint in 2) with the same next losses; a rank that
raises stops the job with its message.

Tolerance: 1e-4 nats on losses and 1e-4 on weights after 10 AdamW steps. The ranks sum
their gradients in another order than one process does (fp32 rounding, ~1e-7 per step);
measured differences are ~5e-7 in the losses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import titans_atlas as ta
from titans_atlas.io import CheckpointError
from titans_atlas.models.rows import concat_rows, reset_rows, take_rows
from titans_atlas.train import build_config, train
from titans_atlas.train.checkpointing import consolidate
from titans_atlas.train.distributed import BlockResets, Parallel, setup_parallel

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch built without torch.distributed"
)
ROOT = Path(__file__).resolve().parents[2]
# Child processes import the package the tests import: src/ or an installed wheel.
SRC = Path(ta.__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("dist_worker.py")
TOL = 1e-4
STEPS, ROWS = 10, 4  # global rows: 4 in one process, 2 per rank in two
MODES = ("packed", "stream")
QUIET = {"train.progress": False, "train.threads": 1}


def settings(out_dir: Path, mode: str, extra: dict | None = None) -> dict:
    return {
        "data.mode": mode, "train.steps": STEPS, "train.grad_accum": 2, "train.eval_every": STEPS,
        "train.checkpoint_every": 5, "train.keep_last": 5, "train.out_dir": str(out_dir),
        **(extra or {}),
    }  # fmt: skip


def torchrun(spec: dict, tmp: Path, timeout: float) -> subprocess.CompletedProcess:
    (tmp / "jobs.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{ROOT / 'tests'}"}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run(
        [*cmd, str(WORKER), str(tmp / "jobs.json")],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def one_process(out_dir: Path, mode: str, resume=False, extra: dict | None = None) -> dict:
    extra = {"train.batch_size": ROWS, **(extra or {})}
    config = build_config("debug", overrides={**QUIET, **settings(out_dir, mode, extra)})
    result = train(config, resume=resume)
    return {"losses": result.losses, "eval": result.eval, "checkpoint": result.checkpoint}


def step5(run: Path) -> str:
    return str(run / "checkpoints" / "step_00000005")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("dist")
    results = {f"one_{m}": one_process(tmp / f"one_{m}", m) for m in MODES}
    jobs = []
    for strategy in ("ddp", "fsdp"):
        for mode in MODES:
            name = f"{strategy}_{mode}"
            extra = {"train.strategy": strategy, "train.batch_size": ROWS // 2}
            jobs.append({"name": name, "overrides": settings(tmp / name, mode, extra)})
            jobs[-1]["count_reductions"] = True
    recompute = {"train.activation_checkpoint": True, "train.memory_checkpoint": True}
    for strategy, mode in (("ddp", "packed"), ("fsdp", "stream")):
        extra = {"train.strategy": strategy, "train.batch_size": ROWS // 2, **recompute}
        name = f"{strategy}_{mode}_recompute"
        jobs.append({"name": name, "overrides": settings(tmp / name, mode, extra)})
    for name, source, strategy, mode in (
        ("fsdp_packed_from_2", tmp / "fsdp_packed", "fsdp", "packed"),  # 2 -> 2
        ("ddp_stream_from_2", tmp / "fsdp_stream", "ddp", "stream"),  # FSDP -> DDP
        ("fsdp_stream_from_1", tmp / "one_stream", "fsdp", "stream"),  # 1 -> 2
        ("ddp_packed_from_1", tmp / "one_packed", "ddp", "packed"),
    ):
        extra = {"train.strategy": strategy, "train.batch_size": ROWS // 2}
        overrides = settings(tmp / name, mode, extra)
        jobs.append({"name": name, "overrides": overrides, "resume": step5(source)})
    done = torchrun({"results": str(tmp), "jobs": jobs}, tmp, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    for job in jobs:
        record = json.loads((tmp / f"{job['name']}.json").read_text())
        record["losses"] = {int(k): v for k, v in record["losses"].items()}
        results[job["name"]] = record
    for name, source, mode in (("one_from_fsdp", "fsdp_packed", "packed"),
                               ("one_from_ddp", "ddp_stream", "stream")):  # fmt: skip
        resume = step5(tmp / source)
        results[name] = one_process(tmp / name, mode, resume)
    results["tmp"] = tmp
    return results


def close(a: dict, b: dict, steps) -> None:
    for step in steps:
        assert abs(a[step] - b[step]) < TOL, (step, a[step], b[step])


def weights(checkpoint) -> dict[str, torch.Tensor]:
    return load_file(str(Path(checkpoint) / "model" / "model.safetensors"))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.slow
def test_two_ranks_match_one_process(runs, strategy, mode):
    two, one = runs[f"{strategy}_{mode}"], runs[f"one_{mode}"]
    assert sorted(two["losses"]) == list(range(1, STEPS + 1))
    close(two["losses"], one["losses"], range(1, STEPS + 1))
    assert abs(two["eval"]["val_loss"] - one["eval"]["val_loss"]) < TOL
    assert two["eval"]["val_tokens"] == one["eval"]["val_tokens"]
    mine, reference = weights(two["checkpoint"]), weights(one["checkpoint"])
    assert mine.keys() == reference.keys()
    for name, value in mine.items():
        assert (value - reference[name]).abs().max() < TOL, name
    # one reduction per step (DDP: one bucket; FSDP2: one per block and the root), not two
    per_step = 1 if strategy == "ddp" else ta.create_model("lmm", preset="debug").config.depth + 1
    assert two["reductions"] == per_step * STEPS


@pytest.mark.slow
@pytest.mark.parametrize("run", ["ddp_packed_recompute", "fsdp_stream_recompute"])
def test_activation_checkpointing_composes_with_both(runs, run):
    """Blocks and memory chunks recomputed in backward: the same losses."""
    mode = run.split("_")[1]
    close(runs[run]["losses"], runs[f"one_{mode}"]["losses"], range(1, STEPS + 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("resumed", "uninterrupted"),
    [
        ("one_from_fsdp", "fsdp_packed"),  # 2 ranks -> 1 process
        ("one_from_ddp", "ddp_stream"),  # 2 ranks -> 1 process, carried stream rows
        ("fsdp_packed_from_2", "fsdp_packed"),  # 2 -> 2
        ("ddp_stream_from_2", "fsdp_stream"),  # FSDP2 shards -> DDP
        ("fsdp_stream_from_1", "one_stream"),  # a 1-process checkpoint -> 2 ranks
        ("ddp_packed_from_1", "one_packed"),
    ],
)
def test_checkpoints_resume_in_another_world_size(runs, resumed, uninterrupted):
    after = runs[resumed]["losses"]
    assert sorted(after) == list(range(6, STEPS + 1))
    close(after, runs[uninterrupted]["losses"], range(6, STEPS + 1))


@pytest.mark.slow
def test_sharded_checkpoints_hold_safetensors_and_json_only(runs):
    directory = Path(runs["fsdp_stream"]["checkpoint"])
    files = sorted(p.relative_to(directory) for p in directory.rglob("*") if p.is_file())
    assert {p.suffix for p in files} == {".safetensors", ".json"}
    shards = [p for p in files if p.parts[0] == "shards"]
    assert len(shards) == 2  # every rank wrote its part
    assert len([p for p in files if p.parts[0] == "stream_state"]) == 2
    manifest = json.loads((directory / "manifest.json").read_text())
    assert set(manifest) == {str(p) for p in files if str(p) != "manifest.json"}
    state = json.loads((directory / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["layout"] == "sharded"
    # the FSDP2 shards split the embedding between the files, each piece with its offset
    embed = [load_file(str(directory / p)).get("model.embed.weight") for p in shards]
    assert sum(e.shape[0] for e in embed if e is not None) == 256


@pytest.mark.slow
def test_consolidate_writes_the_model_load_model_reads(runs, tmp_path):
    checkpoint = Path(runs["fsdp_packed"]["checkpoint"])
    out = consolidate(checkpoint, tmp_path / "model")
    model = ta.load_model(out)
    exported = ta.load_model(checkpoint / "model").state_dict()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, exported[name], rtol=0, atol=0)
    assert (out / "tokenizer_spec.json").is_file()
    with pytest.raises(CheckpointError, match="not a sharded checkpoint"):
        consolidate(runs["one_packed"]["checkpoint"], tmp_path / "x")


@pytest.mark.slow
def test_a_failing_rank_stops_the_job_with_its_message(tmp_path):
    job = {
        "fail_rank": 1, "fail_at_step": 3,
        "overrides": {"train.strategy": "ddp", "train.steps": 50, "train.batch_size": 2,
                      "train.dist_timeout": 60, "train.out_dir": str(tmp_path / "run")},
    }  # fmt: skip
    start = time.monotonic()
    done = torchrun({"cli": True, "jobs": [job]}, tmp_path, timeout=300)
    elapsed = time.monotonic() - start
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "injected failure on rank 1 at step 3" in output
    assert "rank 1 of 2" in output or "rank      : 1" in output
    assert elapsed < 240, elapsed  # stopped by the failure, not by a timeout


@pytest.mark.slow
def test_titans_train_under_torchrun(tmp_path):
    """The command line itself: 2 ranks of ``python -m titans_atlas train`` with FSDP2; one
    report (rank 0), a sample from the exported model, a model directory load_model reads."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "titans_atlas", "train", "--preset", "debug", "--steps", "4", "--out", str(out),
           "--set", "train.strategy=fsdp", "--set", "train.batch_size=2",
           "--set", "train.sample_tokens=8", "--set", "train.progress=false",
           "--set", "train.log_every=2"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("validation:") == 1 and "sample:" in done.stdout
    assert ta.load_model(out / "checkpoints" / "step_00000004" / "model").config.name == "lmm"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [2, 4]  # one writer: rank 0


@pytest.mark.slow
def test_compile_composes_with_both(tmp_path):
    """torch.compile around DDP and around the FSDP2 model: the losses of one process.
    (Inductor on CPU: minutes per process.)"""
    steps = {"train.steps": 2, "train.compile": True}
    reference = one_process(tmp_path / "one", "packed", extra={"train.steps": 2})["losses"]
    jobs = []
    for strategy in ("ddp", "fsdp"):
        extra = {"train.strategy": strategy, "train.batch_size": ROWS // 2, **steps}
        jobs.append({"name": strategy, "overrides": settings(tmp_path / strategy, "packed", extra)})
    done = torchrun({"results": str(tmp_path), "jobs": jobs}, tmp_path, timeout=3000)
    assert done.returncode == 0, done.stderr[-6000:]
    for strategy in ("ddp", "fsdp"):
        losses = json.loads((tmp_path / f"{strategy}.json").read_text())["losses"]
        close({int(k): v for k, v in losses.items()}, reference, (1, 2))


# -- in-process pieces -------------------------------------------------------------------------
def test_fsdp_in_a_world_of_one_matches_one_process(tmp_path):
    base = {**QUIET, **settings(tmp_path / "a", "stream", {"train.steps": 3})}
    base["train.checkpoint_every"] = base["train.eval_every"] = 100
    plain = train(build_config("debug", overrides=base)).losses
    fsdp = {**base, "train.strategy": "fsdp", "train.out_dir": str(tmp_path / "b")}
    sharded = train(build_config("debug", overrides=fsdp)).losses
    close(sharded, plain, range(1, 4))
    assert not torch.distributed.is_initialized()  # train() closed the group it made


@pytest.mark.parametrize("name", ["mag", "mac", "lmm"])
def test_block_resets_equal_reset_rows(name):
    """The FSDP2 reset (inside each block's forward) gives reset_rows's logits and
    gradients."""
    model = ta.create_model(name, preset="debug", window=16, chunk_size=16)
    ids = torch.randint(0, 256, (3, 32))
    _, state = model(ids[:, :16])
    rows = torch.tensor([True, False, True])
    results = []
    for reset in (reset_rows, BlockResets(model)):
        model.zero_grad()
        logits, _ = model(ids[:, 16:], reset(model, state.detach(), rows))
        logits.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logits, grads))
        if isinstance(reset, BlockResets):
            reset.remove()
    (a, grads_a), (b, grads_b) = results
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert grads_a.keys() == grads_b.keys()
    for key in grads_a:
        torch.testing.assert_close(grads_a[key], grads_b[key], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["mac", "mag"])
def test_take_and_concat_rows_are_inverse(name):
    model = ta.create_model(name, preset="debug", window=16, chunk_size=16)
    ids = torch.randint(0, 256, (4, 24))
    _, state = model(ids[:, :20])
    parts = [take_rows(state, 0, 1), take_rows(state, 1, 3), take_rows(state, 3, 4)]
    assert [p.batch_size for p in parts] == [1, 2, 1]
    whole = concat_rows(parts)
    expected, _ = model(ids[:, 20:], state)
    again, _ = model(ids[:, 20:], whole)
    torch.testing.assert_close(again, expected, rtol=0, atol=0)
    middle, _ = model(ids[1:3, 20:], parts[1])
    torch.testing.assert_close(middle, expected[1:3], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="rows"):
        take_rows(state, 2, 5)


def test_strategy_settings_are_checked(monkeypatch):
    with pytest.raises(ValueError, match=r"train\.strategy must be one of"):
        build_config("debug", overrides={"train.strategy": "zero3"})
    with pytest.raises(ValueError, match="dist_timeout"):
        build_config("debug", overrides={"train.dist_timeout": 0})
    assert setup_parallel(build_config("debug").train) == Parallel()  # no launcher: one process
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="strategy='none'"):
        setup_parallel(build_config("debug", overrides={"train.strategy": "none"}).train)


@pytest.mark.slow
def test_resume_in_another_world_size_keeps_the_global_batch(runs, tmp_path):
    resume = step5(runs["tmp"] / "fsdp_packed")  # 2 ranks x 2 rows
    extra = {"train.batch_size": 3}
    config = build_config("debug", overrides={**QUIET, **settings(tmp_path, "packed", extra)})
    with pytest.raises(CheckpointError, match=r"2 x 2 when saved, 3 x 1 now"):
        train(config, resume=resume)


# -- CUDA / NCCL (pytest -m gpu) -----------------------------------------------------------------
TOL_BF16 = 5e-3  # nats: bf16 autocast rounds differently when the reduction order changes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", MODES)
def test_fsdp_on_one_gpu_matches_one_gpu(tmp_path, mode):
    """The single-GPU FSDP2 path (a world of one over NCCL) with bf16 autocast."""
    extra = {"train.device": "cuda", "train.precision": "bf16", "train.batch_size": ROWS}
    base = {**QUIET, **settings(tmp_path / "plain", mode, extra)}
    plain = train(build_config("debug", overrides=base)).losses
    fsdp = {**base, "train.strategy": "fsdp", "train.out_dir": str(tmp_path / "fsdp")}
    sharded = train(build_config("debug", overrides=fsdp)).losses
    for step in range(1, STEPS + 1):
        assert abs(sharded[step] - plain[step]) < TOL_BF16, (step, sharded[step], plain[step])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_two_gpus_over_nccl_match_one_gpu(tmp_path):
    """DDP and FSDP2 on 2 GPUs (NCCL, bf16 autocast) against 1 GPU with the global batch; a
    1-GPU checkpoint resumed on 2 GPUs and a sharded one resumed on 1 GPU."""
    gpu = {"train.device": "cuda", "train.precision": "bf16"}
    runs = (("ddp", "packed"), ("fsdp", "stream"), ("fsdp", "packed"))
    reference = {}
    for mode in MODES:
        extra = {**gpu, "train.batch_size": ROWS}
        one = build_config("debug", overrides={**QUIET, **settings(tmp_path / mode, mode, extra)})
        reference[mode] = train(one).losses
    jobs = []
    for strategy, mode in runs:
        extra = {**gpu, "train.strategy": strategy, "train.batch_size": ROWS // 2}
        name = f"{strategy}_{mode}"
        jobs.append({"name": name, "overrides": settings(tmp_path / name, mode, extra)})
    extra = {**gpu, "train.strategy": "fsdp", "train.batch_size": ROWS // 2}
    jobs.append({"name": "from_1", "overrides": settings(tmp_path / "from_1", "stream", extra),
                 "resume": step5(tmp_path / "stream")})  # fmt: skip
    done = torchrun({"results": str(tmp_path), "jobs": jobs, "backend": "nccl"}, tmp_path, 900)
    assert done.returncode == 0, done.stderr[-6000:]

    def losses(name: str) -> dict[int, float]:
        record = json.loads((tmp_path / f"{name}.json").read_text())["losses"]
        return {int(k): v for k, v in record.items()}

    for strategy, mode in runs:
        for step in range(1, STEPS + 1):
            got, want = losses(f"{strategy}_{mode}")[step], reference[mode][step]
            assert abs(got - want) < TOL_BF16, (strategy, mode, step, got, want)
    for step in range(6, STEPS + 1):
        assert abs(losses("from_1")[step] - reference["stream"][step]) < TOL_BF16
    extra = {**gpu, "train.batch_size": ROWS}
    resumed = build_config(
        "debug", overrides={**QUIET, **settings(tmp_path / "r", "stream", extra)}
    )
    after = train(resumed, resume=step5(tmp_path / "fsdp_stream")).losses
    for step in range(6, STEPS + 1):
        assert abs(after[step] - losses("fsdp_stream")[step]) < TOL_BF16
