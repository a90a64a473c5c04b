"""The training loop: ``train(config)`` from Python, ``titans train`` from the shell.

Axes: B batch rows, T tokens (``seq_len``), V vocabulary.
One step = ``grad_accum`` micro-batches (in stream mode, consecutive windows of the same rows,
the state carried and detached between them: truncated backpropagation through time), a
finiteness check that names the parameters at fault, gradient clipping, an AdamW step.
Evaluation, metrics and checkpoints run every N steps; SIGINT / SIGTERM finish the current
step, write a checkpoint and return.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checkpoint import CheckpointError
from ..models.backbone import build_model
from .checkpoint import find_checkpoint, load_checkpoint, save_checkpoint, verify_checkpoint
from .config import RESUMABLE, RunConfig, config_differences
from .evaluate import evaluate, token_losses
from .metrics import MetricsLog, truncate_metrics
from .optim import build_optimizer, learning_rate, set_learning_rate
from .pipeline import build_pipeline
from .runtime import (
    GateStats,
    autocast_context,
    memory_layers,
    memory_state_norms,
    pick_device,
)
from .stream import check_stream_alignment, reset_rows


class NonFiniteError(RuntimeError):
    """A loss or gradient went inf / NaN; the message names the step and the parameters."""


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    losses: dict[int, float] = field(default_factory=dict)  # step -> training loss
    eval: dict[str, float] = field(default_factory=dict)  # the last evaluation
    checkpoint: Path | None = None
    stopped_by: str | None = None  # "SIGINT" / "SIGTERM" when a signal ended the run


class Trainer:
    def __init__(
        self, config: RunConfig, *, resume: bool | str = False, rank: int = 0, world_size: int = 1
    ):
        self.config, self.rank, self.world_size = config, rank, world_size
        loop = config.train
        if loop.threads:
            torch.set_num_threads(loop.threads)
        self.device = pick_device(loop)
        self.autocast = autocast_context(loop, self.device)
        self.run_dir = Path(loop.out_dir)
        self.pipeline = build_pipeline(config, rank, world_size)
        torch.manual_seed(loop.seed)
        model_config = config.model.build()
        if model_config.vocab_size < self.pipeline.vocab_size:
            raise ValueError(
                f"model vocab_size={model_config.vocab_size} is smaller than the data's "
                f"{self.pipeline.vocab_size}: --set model.vocab_size={self.pipeline.vocab_size}"
            )
        self.model = build_model(model_config).to(self.device)
        self.stream = config.data.mode == "stream"
        if self.stream:
            check_stream_alignment(self.model, loop.seq_len)
        if loop.memory_checkpoint:
            self.model.set_runtime(memory_checkpoint=True)
        self.forward = torch.compile(self.model) if loop.compile else self.model
        self.optimizer = build_optimizer(self.model, config.optim)
        self.step, self.best_val, self.carried = 0, None, None
        if resume:
            self._resume(resume)

    def _resume(self, resume: bool | str) -> None:
        where = self.run_dir if resume is True else Path(resume)
        directory = find_checkpoint(where)
        saved = verify_checkpoint(directory)
        differ = [
            k
            for k in config_differences(saved["config"], self.config.to_dict())
            if k not in RESUMABLE
        ]
        if differ:
            raise CheckpointError(
                f"{directory} was written by a run with other settings: {', '.join(differ)}"
            )
        state, self.carried = load_checkpoint(directory, self.model, self.optimizer)
        if self.carried is not None:
            self.carried = self.carried.to(self.device)
        self.step, self.best_val = int(state["step"]), state.get("best_val_loss")
        self.pipeline.train.load_state_dict(state["data"])

    # -- one step ---------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        loop = self.config.train
        lr = learning_rate(self.step, loop.steps, self.config.optim)
        set_learning_rate(self.optimizer, lr)
        self.optimizer.zero_grad(set_to_none=True)
        losses, tokens = [], 0
        for _ in range(loop.grad_accum):
            batch = self.pipeline.train.next()
            inputs, labels = batch.inputs.to(self.device), batch.labels.to(self.device)
            state = reset_rows(self.model, self.carried, batch.reset) if self.stream else None
            logits, state = self._forward(inputs, state)
            scored = (labels >= 0).sum().clamp(min=1)
            loss = token_losses(logits, labels).sum() / scored
            (loss / loop.grad_accum).backward()
            if self.stream:
                self.carried = state.detach()
            self.last_state = state
            losses.append(float(loss.detach()))
            tokens += inputs.numel()
        loss = sum(losses) / len(losses)
        self._check_finite(loss)
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = loop.grad_clip if loop.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        self.optimizer.step()
        self.step += 1
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens": tokens * self.world_size}

    def _forward(self, inputs: torch.Tensor, state):
        try:
            with self.autocast:
                return self.forward(inputs, state)
        except ValueError as err:  # the memory refuses non-finite inputs: say where and why
            if "NaN or inf" not in str(err):
                raise
            norms = [round(n, 2) for n in memory_state_norms(self.carried)]
            raise NonFiniteError(
                f"step {self.step + 1}: the forward pass went non-finite ({err}); memory state "
                f"norms carried into the step: {norms or 'none (fresh state)'}; non-finite "
                f"parameters: {self._non_finite_parameters()[0] or 'none'}"
            ) from err

    def _non_finite_parameters(self) -> tuple[list[str], list[str]]:
        bad_params, bad_grads = [], []
        for name, param in self.model.named_parameters():
            if not torch.isfinite(param).all():
                bad_params.append(name)
            if param.grad is not None and not torch.isfinite(param.grad).all():
                bad_grads.append(name)
        return bad_params, bad_grads

    def _check_finite(self, loss: float) -> None:
        bad_params, bad_grads = self._non_finite_parameters()
        if bad_params or bad_grads or not torch.isfinite(torch.tensor(loss)):
            raise NonFiniteError(
                f"step {self.step + 1}: loss {loss}; "
                f"non-finite parameters: {bad_params or 'none'}; "
                f"non-finite gradients: {bad_grads or 'none'}. Stopped before the optimizer "
                "step: no checkpoint holds these values."
            )

    # -- evaluation and checkpoints -----------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        batches, count = self.pipeline.make_val()
        return evaluate(
            self.model, batches, count, stream=self.stream, byte_lengths=self.pipeline.byte_lengths,
            device=self.device, autocast=self.autocast,
        )  # fmt: skip

    def save(self, val_loss: float | None = None) -> Path | None:
        if self.rank != 0:
            return None
        if val_loss is not None and (self.best_val is None or val_loss < self.best_val):
            self.best_val = val_loss
        trainer_state = {
            "step": self.step,
            "config": self.config.to_dict(),
            "data": self.pipeline.train.state_dict(),
            "best_val_loss": self.best_val,
        }
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
        loop = self.config.train
        main = self.rank == 0
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "run_config.json").write_text(
                json.dumps(self.config.to_dict(), indent=2) + "\n"
            )
            truncate_metrics(self.run_dir / "metrics.jsonl", self.step)
        log = MetricsLog(
            self.run_dir,
            loop.steps,
            self.step,
            enabled=main,
            progress=loop.progress,
            tensorboard=loop.tensorboard,
        )
        gates = GateStats(self.model)
        result = TrainResult(self.run_dir, self.step)
        stop = _SignalFlag()
        try:
            self._run_steps(log, gates, result, stop)
        finally:
            stop.restore()
            gates.remove()
            log.close()
        return result

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
                entry["memory"] = self._memory_stats(gates.collect())
                log.record(entry)
                tick, tokens = time.perf_counter(), 0
            log.progress(1, entry)
            evaluated = None
            if self.step % loop.eval_every == 0 or self.step == loop.steps:
                evaluated = result.eval = self.evaluate()
                log.record({"step": self.step, **evaluated})
                log.say(_eval_line(self.step, evaluated))
            if self.step % loop.checkpoint_every == 0 or self.step == loop.steps or stop.signal:
                result.checkpoint = self.save(evaluated["val_loss"] if evaluated else None)
            if stop.signal:
                result.stopped_by = stop.signal
                log.say(
                    f"{stop.signal}: stopped at step {self.step}; checkpoint {result.checkpoint}"
                )
                break
        result.step = self.step

    def _memory_stats(self, gates: list[dict[str, float]]) -> list[dict[str, float]]:
        norms = memory_state_norms(self.last_state)
        stats = []
        for i, _ in enumerate(memory_layers(self.model)):
            entry = dict(gates[i]) if i < len(gates) else {}
            if i < len(norms):
                entry["state_norm"] = norms[i]
            stats.append(entry)
        return stats


def _eval_line(step: int, result: dict[str, float]) -> str:
    parts = [f"eval @ step {step}: loss {result['val_loss']:.4f}"]
    if "val_bpb" in result:
        parts.append(f"bits/byte {result['val_bpb']:.4f}")
    parts.append(f"accuracy {result['val_accuracy']:.3f}")
    return ", ".join(parts)


class _SignalFlag:
    """SIGINT / SIGTERM set a flag the loop checks after each step (a second SIGINT
    interrupts at once)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.previous = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: no handlers, the caller owns signals
            self.previous = {}

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train(
    config: RunConfig, *, resume: bool | str = False, rank: int = 0, world_size: int = 1
) -> TrainResult:
    """Train ``config`` (resume from its ``out_dir``, or from a given run / checkpoint
    directory); returns the losses, the last evaluation and the last checkpoint."""
    return Trainer(config, resume=resume, rank=rank, world_size=world_size).run()
