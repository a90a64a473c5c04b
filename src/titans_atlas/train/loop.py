"""The training loop: ``train(config)`` from Python, ``titans train`` from the shell.

Axes: B batch rows, T tokens (``seq_len``), V vocabulary.
One step = ``grad_accum`` micro-batches (in stream mode, consecutive windows of the same rows,
the state carried and detached between them: truncated backpropagation through time), a
finiteness check that names the parameters at fault, gradient clipping, an AdamW step.
Evaluation, metrics and checkpoints run every N steps; SIGINT / SIGTERM finish the current
step, write a checkpoint and return. Under torchrun the same loop runs on every rank
(``distributed.py``): each rank takes its rows of the global batch, the loss is normalised
by the global count of scored tokens so the gradient equals one process's, and the ranks
agree on the reported loss, evaluation, non-finite stops and signals.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..compiling import TrainCompileChoice, fallback_message
from ..io import CheckpointError
from ..io.run_dir import clear_earlier_run, fresh_run, lock_run_dir
from ..io.sharded import load_training_state, save_sharded
from ..io.training import (
    check_init_outside_run,
    find_checkpoint,
    load_initial_weights,
    save_checkpoint,
    verify_checkpoint,
)
from ..models.backbone import build_model
from ..models.config import ModelConfig
from ..models.pretrained import model_config_differences
from ..models.rows import check_stream_alignment, reset_rows
from ..ops import validating
from .checkpointing import saved_model_config
from .config import RunConfig, resume_differences
from .data.pipeline import build_pipeline
from .diagnostics import (
    NonFiniteError,
    check_finite,
    eval_line,
    memory_stats,
)
from .distributed import Parallel, initial_weight_parameters, setup_parallel
from .evaluate import evaluate, token_losses
from .metrics import MetricsLog, truncate_metrics
from .optim import build_optimizer, learning_rate, set_learning_rate
from .runtime import (
    GateStats,
    SignalFlag,
    autocast_context,
    enable_activation_checkpointing,
    pick_device,
)

__all__ = ["NonFiniteError", "TrainResult", "Trainer", "train"]


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    losses: dict[int, float] = field(default_factory=dict)  # step -> training loss
    eval: dict[str, float] = field(default_factory=dict)  # the last evaluation
    checkpoint: Path | None = None
    stopped_by: str | None = None  # "SIGINT" / "SIGTERM" when a signal ended the run


class Trainer:
    """One process's part of a run; ``parallel`` defaults to ``setup_parallel`` (a single
    process unless torchrun launched this one or ``train.strategy`` asks for DDP / FSDP)."""

    def __init__(
        self,
        config: RunConfig,
        *,
        resume: bool | str = False,
        parallel: Parallel | None = None,
        force: bool = False,
    ):
        loop = config.train
        self.run_dir = Path(loop.out_dir)
        # before anything is built: a refused run costs nothing and changes nothing
        if loop.init_from and not resume:
            check_init_outside_run(loop.init_from, self.run_dir)
        self.fresh = fresh_run(self.run_dir, resume, force)
        if loop.threads:
            torch.set_num_threads(loop.threads)
        self.parallel = parallel if parallel is not None else setup_parallel(loop)
        self.config, self.rank = config, self.parallel.rank
        self.world_size = self.parallel.world_size
        self.device = self.parallel.device or pick_device(loop)
        self.autocast = autocast_context(loop, self.device)
        self.pipeline = build_pipeline(config, self.rank, self.world_size)
        # every run ends with an evaluation: data too small for one is refused before step 1,
        # not after the last (when the final checkpoint would be lost with it)
        self.pipeline.make_val()
        torch.manual_seed(loop.seed)
        model_config = config.model.build()
        if resume:
            model_config = self._resumed_model_config(resume, model_config)
        if model_config.vocab_size < self.pipeline.vocab_size:
            raise ValueError(
                f"model vocab_size={model_config.vocab_size} is smaller than the data's "
                f"{self.pipeline.vocab_size}: --set model.vocab_size={self.pipeline.vocab_size}"
            )
        self.model = build_model(model_config).to(self.device)
        if loop.init_from and not resume:
            load_initial_weights(self.model, loop.init_from, self.run_dir)
        self.stream = config.data.mode == "stream"
        if self.stream:
            check_stream_alignment(self.model, loop.seq_len)
        if loop.memory_checkpoint:
            self.model.set_runtime(memory_checkpoint=True)
        if loop.activation_checkpoint:
            enable_activation_checkpointing(self.model)
        self.eager_forward = self.parallel.wrap(self.model, stream=self.stream)
        self.forward, self._compile_unproven = self.eager_forward, False
        self.say = self._say_stderr  # run() routes messages through its log
        self.reset = self.parallel.row_reset(self.model) if self.stream else None
        self.optimizer = build_optimizer(self.model, config.optim)
        self.step, self.best_val, self.carried = 0, None, None
        if resume:
            self._resume()
        # after a resume: "auto" counts the steps still to go
        self.compile_choice = TrainCompileChoice.decide(
            loop.compile, self.device, loop.steps - self.step
        )
        if self.compile_choice.use:
            self._compile()

    def _resumed_model_config(self, resume: bool | str, built: ModelConfig) -> ModelConfig:
        """The model a resumed run continues, after refusing a checkpoint written with other
        settings (before anything is built). The checkpoint's own model when a library default
        has moved since it was written (a preset's inner step, say), so the run goes on as it
        was trained -- not refused, not silently changed. Keeps the verified checkpoint for
        ``_resume``."""
        directory = find_checkpoint(self.run_dir if resume is True else Path(resume))
        saved = verify_checkpoint(directory, part=(self.rank, self.world_size))
        differ = resume_differences(saved, self.config, self.world_size)
        if differ:
            raise CheckpointError(
                f"{directory} was written by a run with other settings: {', '.join(differ)}"
            )
        self._checkpoint = (directory, saved)
        theirs = saved_model_config(directory, saved)
        moved = [key for key, *_ in model_config_differences(theirs.to_dict(), built.to_dict())]
        if moved:
            self._say_stderr(
                f"resume: the model as {directory} holds it ({', '.join(moved)} moved in "
                "the library's defaults since it was written)"
            )
        return theirs

    def _resume(self) -> None:
        directory, saved = self._checkpoint
        rows = self.config.train.batch_size
        mine = (self.rank * rows, (self.rank + 1) * rows)
        self.carried = load_training_state(
            directory, saved, self.parallel, self.model, self.optimizer, mine
        )
        if self.carried is not None:
            self.carried = self.carried.to(self.device)
        self.step, self.best_val = saved["step"], saved.get("best_val_loss")
        try:
            self.pipeline.train.load_state_dict(saved["data"])
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise CheckpointError(f"{directory}: its data cursor does not fit: {err}") from err

    # -- compile (train.compile: "auto" / true / false) -------------------------------------
    def _compile(self) -> None:
        self.forward = torch.compile(self.eager_forward)
        self._compile_unproven = True  # compilation happens in the first step: it may fail

    def _say_stderr(self, text: str) -> None:
        if self.parallel.main:
            print(text, file=sys.stderr, flush=True)

    # -- one step ---------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        """One optimiser step. The first compiled step is guarded: if compilation raises (in
        the forward or the backward), the step is redone eager on the same micro-batches and
        the run goes on eager, with one line saying so."""
        carried_in, batches = self.carried, []
        if not self._compile_unproven:
            metrics = self._step(batches)
        else:
            try:
                metrics = self._step(batches)
            except NonFiniteError:
                raise
            except Exception as err:  # a compiler failure; a model error raises again below
                self.forward, self.carried = self.eager_forward, carried_in
                self.compile_choice.use = False
                self.compile_choice.reason = "compile failed: eager"
                self.say(f"compile: {fallback_message(err)}")
                metrics = self._step(batches)
            self._compile_unproven = False
        return metrics

    def _step(self, batches: list) -> dict[str, float]:
        """The step proper; ``batches`` holds its micro-batches once drawn, so a retry takes
        the same ones."""
        loop = self.config.train
        lr = learning_rate(self.step, loop.steps, self.config.optim)
        set_learning_rate(self.optimizer, lr)
        self.optimizer.zero_grad(set_to_none=True)
        sums, counts, tokens, fresh = [], [], 0, not self.stream
        carried_in = self.carried
        for micro in range(loop.grad_accum):
            if micro == len(batches):
                batches.append(self.pipeline.train.next())
            batch = batches[micro]
            inputs, labels = batch.inputs.to(self.device), batch.labels.to(self.device)
            state = None
            if self.stream:
                state = self.reset(self.model, self.carried, batch.reset)
                fresh = fresh or state is None or bool(batch.reset.any())
            # every rank's scored tokens: each rank's share of one process's mean loss
            scored = self.parallel.sum_tensor((labels >= 0).sum()).clamp(min=1)
            with self.parallel.gradient_sync(self.forward, micro == loop.grad_accum - 1):
                logits, state = self._forward(inputs, state)
                total = token_losses(logits, labels).sum()
                loss = total / scored
                (loss * self.world_size / loop.grad_accum).backward()
            if self.stream:
                self.carried = state.detach()
            self.last_state = state
            sums.append(float(loss.detach()) if self.world_size == 1 else float(total.detach()))
            counts.append(float(scored))
            tokens += inputs.numel()
        loss = self._mean_loss(sums, counts)
        try:
            check_finite(self.model, self.parallel, self.step + 1, loss, carried_in)
        except NonFiniteError:
            self.carried = carried_in  # the step does not happen, nor does its state
            raise
        if self.stream and not self.parallel.any(fresh):
            for param in initial_weight_parameters(self.model):
                param.grad = None  # no stream started: as one process, no gradient
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = loop.grad_clip if loop.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        self.optimizer.step()
        self.step += 1
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens": tokens * self.world_size}

    def _mean_loss(self, sums: list[float], counts: list[float]) -> float:
        """The step's loss: the mean over micro-batches of each one's mean over every rank's
        scored tokens (``sums`` are the losses themselves in one process)."""
        if self.world_size == 1:
            return sum(sums) / len(sums)
        totals = self.parallel.all_sum(sums)
        return sum(t / c for t, c in zip(totals, counts)) / len(counts)

    def _forward(self, inputs: torch.Tensor, state):
        # The memory layers' per-call NaN checks (a host sync per scan call: per segment for
        # MAC) would only say earlier what the step's one finite check says anyway.
        with self.autocast, validating(False):
            return self.forward(inputs, state)

    # -- evaluation and checkpoints -----------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        batches, count = self.pipeline.make_val()
        return evaluate(
            self.model, batches, count, stream=self.stream, byte_lengths=self.pipeline.byte_lengths,
            device=self.device, autocast=self.autocast, reset=self.reset or reset_rows,
            reduce=self.parallel.all_sum if self.world_size > 1 else None,
        )  # fmt: skip

    def save(self, val_loss: float | None = None) -> Path:
        """Write a checkpoint (every rank takes part in a distributed run)."""
        if val_loss is not None and (self.best_val is None or val_loss < self.best_val):
            self.best_val = val_loss
        trainer_state = {
            "step": self.step,
            "config": self.config.to_dict(),
            "data": self.pipeline.train.state_dict(),
            "best_val_loss": self.best_val,
        }
        if self.parallel.distributed:
            return save_sharded(
                self.run_dir, self.parallel, self.model, self.optimizer, trainer_state,
                tokenizer=self.pipeline.tokenizer, stream_state=self.carried,
                keep_last=self.config.train.keep_last, val_loss=val_loss,
                export_model=self.config.train.export_model,
            )  # fmt: skip
        return save_checkpoint(
            self.run_dir,
            self.model,
            self.optimizer,
            trainer_state,
            tokenizer=self.pipeline.tokenizer,
            stream_state=self.carried,
            keep_last=self.config.train.keep_last,
            val_loss=val_loss,
        )

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        """Train to ``train.steps``, holding the run directory's lock (released on any exit)."""
        loop, main = self.config.train, self.parallel.main
        lock = lock_run_dir(self.run_dir, self.parallel, self.fresh == "fresh")
        try:
            if main:
                if self.fresh == "force":
                    clear_earlier_run(self.run_dir)
                config_json = json.dumps(self.config.to_dict(), indent=2) + "\n"
                (self.run_dir / "run_config.json").write_text(config_json)
                truncate_metrics(self.run_dir / "metrics.jsonl", self.step)
            log = MetricsLog(
                self.run_dir, loop.steps, self.step, enabled=main, progress=loop.progress,
                tensorboard=loop.tensorboard,
            )  # fmt: skip
            gates, result = GateStats(self.model), TrainResult(self.run_dir, self.step)
            self.say = log.say
            stop = SignalFlag()
            try:
                self._run_steps(log, gates, result, stop)
            finally:
                stop.restore()
                gates.remove()
                log.close()
            return result
        finally:
            if lock is not None:
                lock.release()

    def _run_steps(self, log: MetricsLog, gates: GateStats, result: TrainResult, stop) -> None:
        loop = self.config.train
        tick, tokens = time.perf_counter(), 0
        while self.step < loop.steps:
            gates.active = (self.step + 1) % loop.log_every == 0
            metrics = self.train_step()
            tokens += metrics.pop("tokens")
            result.losses[self.step] = metrics["loss"]
            entry = None
            if gates.active:
                elapsed = time.perf_counter() - tick
                entry = {"step": self.step, **metrics, "tokens_per_s": tokens / elapsed}
                entry["memory"] = memory_stats(self.model, self.last_state, gates.collect())
                log.record(entry)
                tick, tokens = time.perf_counter(), 0
            log.progress(1, entry)
            evaluated = None
            if _due(self.step, loop.eval_every) or self.step == loop.steps:
                evaluated = result.eval = self.evaluate()
                log.record({"step": self.step, **evaluated})
                log.say(eval_line(self.step, evaluated))
            stopping = self.parallel.agree_signal(stop.signal)
            if _due(self.step, loop.checkpoint_every) or self.step == loop.steps or stopping:
                result.checkpoint = self.save(evaluated["val_loss"] if evaluated else None)
            if stopping:
                result.stopped_by = stopping
                log.say(f"{stopping}: stopped at step {self.step}; checkpoint {result.checkpoint}")
                break
        result.step = self.step


def _due(step: int, every: int) -> bool:
    """Whether a periodic action (``every`` steps; 0: never periodically) falls on ``step``."""
    return every > 0 and step % every == 0


def train(
    config: RunConfig,
    *,
    resume: bool | str = False,
    parallel: Parallel | None = None,
    force: bool = False,
) -> TrainResult:
    """Train ``config`` (resume from its ``out_dir``, or from a given run / checkpoint
    directory); returns the losses, the last evaluation and the last checkpoint. An
    ``out_dir`` that holds another run is refused unless ``resume`` or ``force`` (start
    over: its checkpoints, metrics and run_config are deleted). Under torchrun every rank
    calls it (see ``distributed.py``)."""
    own = parallel is None
    parallel = setup_parallel(config.train) if own else parallel
    try:
        return Trainer(config, resume=resume, parallel=parallel, force=force).run()
    finally:
        if own:
            parallel.close()
