"""One rank of the distributed training tests: ``python -m torch.distributed.run
--nproc-per-node N tests/train/dist_worker.py JOBS.json``.

JOBS.json: ``{"results": DIR, "jobs": [...], "backend": "gloo" | "nccl"}``; each job is
``{"name", "overrides" (train.* / data.* / model.* settings), "resume" (false or a
checkpoint directory), "count_reductions" (bool)}``; with ``"cli": true`` the one job
(``"fail_rank"``, ``"fail_at_step"``) runs ``titans train`` with that rank raising: the
failure test. Jobs run in order in one process group; rank 0 writes ``DIR/NAME.json`` with
the losses, the last evaluation, the checkpoint and the gradient reductions.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from titans_atlas.train import build_config
from titans_atlas.train.distributed import setup_parallel
from titans_atlas.train.loop import Trainer

QUIET = {"train.progress": False, "train.threads": 1}


class ReductionCounter:
    """Counts gradient reductions: DDP through a comm hook, FSDP2 by wrapping the function
    each parameter group's reduce-scatter goes through."""

    def __init__(self, trainer: Trainer) -> None:
        self.count = 0
        if trainer.parallel.strategy == "ddp":
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            def hook(state, bucket):
                self.count += 1
                return allreduce_hook(state, bucket)

            trainer.forward.register_comm_hook(None, hook)
        else:
            from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group

            original = group.foreach_reduce

            def counted(*args, **kwargs):
                self.count += 1
                return original(*args, **kwargs)

            group.foreach_reduce = counted


def run_job(job: dict, results: Path) -> None:
    config = build_config("debug", overrides={**QUIET, **job["overrides"]})
    parallel = setup_parallel(config.train)
    trainer = Trainer(config, resume=job.get("resume") or False, parallel=parallel)
    counter = ReductionCounter(trainer) if job.get("count_reductions") else None
    result = trainer.run()
    if parallel.main:
        record = {
            "losses": {str(k): v for k, v in result.losses.items()},
            "eval": result.eval,
            "checkpoint": str(result.checkpoint),
            "reductions": counter.count if counter else None,
            "world_size": parallel.world_size,
        }
        (results / f"{job['name']}.json").write_text(json.dumps(record))


def run_failing_cli(job: dict) -> int:
    """``titans train`` with one rank raising at a step: the failure test."""
    from titans_atlas.cli import main

    fail_rank, fail_step = job["fail_rank"], job["fail_at_step"]
    if int(os.environ["RANK"]) == fail_rank:
        original = Trainer.train_step

        def train_step(self):
            if self.step + 1 == fail_step:
                raise RuntimeError(f"injected failure on rank {fail_rank} at step {fail_step}")
            return original(self)

        Trainer.train_step = train_step
    args = ["train", "--preset", "debug"]
    for key, value in {**QUIET, **job["overrides"]}.items():
        args += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return main(args)


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    if spec.get("cli"):
        return run_failing_cli(spec["jobs"][0])
    backend = spec.get("backend", "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    try:
        for job in spec["jobs"]:
            run_job(job, Path(spec["results"]))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
