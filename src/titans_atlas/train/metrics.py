"""Where a run reports: ``metrics.jsonl`` (one JSON object per logged step or evaluation), a
live progress bar (tqdm, from the ``[train]`` extra; plain lines without it), and TensorBoard
when asked for."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

METRICS_FILE = "metrics.jsonl"


def truncate_metrics(path: Path, after_step: int) -> None:
    """Drop records past ``after_step`` (a resumed run rewrites them)."""
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and json.loads(line).get("step", 0) <= after_step
    ]
    path.write_text("".join(line + "\n" for line in kept))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsLog:
    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        start_step: int,
        *,
        enabled: bool = True,
        progress: bool = True,
        tensorboard: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        # sys.stderr as it is now, not as it was at import (a caller may have replaced it)
        stream = sys.stderr if stream is None else stream
        self.enabled, self.stream, self.writer, self.bar = enabled, stream, None, None
        if not enabled:
            return
        self.file = (run_dir / METRICS_FILE).open("a")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise ValueError("train.tensorboard needs the tensorboard package") from err
            self.writer = SummaryWriter(str(run_dir / "tensorboard"))
        if progress:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total_steps,
                    initial=start_step,
                    file=stream,
                    unit="step",
                    dynamic_ncols=True,
                )
            except ImportError:
                self.bar = None  # no tqdm: plain lines below

    def record(self, entry: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()
        if self.writer is not None:
            for key, value in _scalars(entry):
                self.writer.add_scalar(key, value, entry["step"])

    def progress(self, steps: int, entry: dict[str, Any] | None) -> None:
        """Advance the bar by ``steps``; ``entry`` (a logged step) updates its numbers."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(steps)
            if entry is not None:
                self.bar.set_postfix(
                    loss=f"{entry['loss']:.3f}", tok_s=f"{entry['tokens_per_s']:.0f}", refresh=False
                )
        elif entry is not None:
            self.say(
                f"step {entry['step']}  loss {entry['loss']:.4f}  lr {entry['lr']:.2e}  "
                f"{entry['tokens_per_s']:.0f} tok/s"
            )

    def say(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        self.file.close()


def _scalars(entry: dict[str, Any], prefix: str = ""):
    for key, value in entry.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and key != "step" and math.isfinite(value):
            yield prefix + key, value
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _scalars(item, f"{prefix}{key}{i}/")
