"""Named run presets: nested dicts in the shape of ``RunConfig.to_dict()`` (the model part
as ``name`` / ``preset`` / ModelConfig or MemoryConfig fields)."""

from __future__ import annotations

from typing import Any

RUN_PRESETS: dict[str, dict[str, Any]] = {
    # Tiny: the golden loss curve and the CLI tests; trains in well under a minute on 2 cores.
    "debug": {
        "model": {"name": "lmm", "dim": 32, "depth": 2, "num_heads": 2, "window": 16,
                  "num_persistent": 2, "chunk_size": 16, "vocab_size": 256},
        "data": {"source": "builtin:shakespeare", "val_fraction": 0.05},
        "optim": {"lr": 3e-3, "warmup_steps": 5},
        "train": {"steps": 40, "batch_size": 4, "seq_len": 64, "eval_every": 20,
                  "eval_tokens": 4096, "log_every": 5, "checkpoint_every": 20,
                  "sample_tokens": 64, "out_dir": "runs/debug"},
    },
    # `titans train` with no arguments: a small MAG on the shipped plays, a few CPU minutes.
    "quickstart": {
        "model": {"name": "mag", "dim": 128, "depth": 2, "num_heads": 4, "window": 64,
                  "num_persistent": 4, "chunk_size": 32, "vocab_size": 256,
                  # decay toward the learned initial weights: streamed past the 128-token
                  # training length, decay toward zero (the papers') climbs from 1.8 to 5.9
                  # nats per 1k bytes, toward init stays at the reset level (docs/results.md)
                  "decay_target": "init"},
        "data": {"source": "builtin:shakespeare", "val_fraction": 0.05},
        "optim": {"lr": 3e-3, "warmup_steps": 30},
        "train": {"steps": 500, "batch_size": 8, "seq_len": 128, "eval_every": 250,
                  "eval_tokens": 16384, "log_every": 10, "checkpoint_every": 250,
                  "sample_tokens": 300, "out_dir": "runs/quickstart"},
    },
    # Recall beyond the attention window (docs/results.md): an 8-token window, 4 pairs among
    # noise, every pair queried at the end, answers up to ~120 tokens back. `titans train
    # --preset recall` trains it, then the SWA control, and prints recall by distance.
    "recall": {
        "model": {"name": "lmm", "dim": 64, "depth": 2, "num_heads": 2, "window": 8,
                  "num_persistent": 4, "chunk_size": 16, "vocab_size": 32,
                  # the layer's defaults bind here (seeds 0-9: recall at 8 windows and 16x
                  # the length in docs/results.md, "Binding in every seed")
                  },
        "data": {"source": "task:kv_multi", "task_args": {"vocab_size": 32, "num_pairs": 4}},
        "optim": {"lr": 3e-3, "warmup_steps": 30},
        "train": {"steps": 300, "batch_size": 32, "seq_len": 128, "eval_every": 150,
                  "eval_tokens": 4096, "log_every": 25, "checkpoint_every": 150,
                  "sample_tokens": 0, "control": "swa", "out_dir": "runs/recall"},
    },
}  # fmt: skip
