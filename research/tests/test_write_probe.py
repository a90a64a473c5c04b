"""research/experiments/write_probe.py: the write of a chunk is its update without the
decay's share, and the oracle's theta scale reaches the memory."""

import sys
from pathlib import Path

import torch

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import write_probe as probe  # noqa: E402

import titans_atlas as ta  # noqa: E402


def model_and_batch(rule: str):
    torch.manual_seed(0)
    model = ta.create_model(
        "lmm", vocab_size=probe.VOCAB, dim=32, depth=2, num_heads=2, chunk_size=8,
        update_rule=rule,
    ).eval()  # fmt: skip
    inputs = torch.randint(1, probe.VOCAB // 2, (3, 48))
    inputs[:, 9] = probe.VOCAB - 1  # a value token: chunk 1 holds a pair, the rest noise
    return model, inputs


def test_without_steps_a_chunk_writes_nothing_beyond_its_decay():
    model, inputs = model_and_batch("muon_chunk")
    calls, scale = probe.instrument(model)
    scale["theta"] = torch.zeros(3)  # per-chunk Muon steps only by theta: no step at all
    stats = probe.chunk_stats(model, inputs, 8, calls)
    assert stats["write"].shape == (2, 6, 3) and stats["theta"].abs().max() == 0
    assert stats["write"].abs().max() < 1e-5
    assert stats["pair"][:, 0].tolist() == [False, True, False, False, False, False]


def test_as_trained_every_chunk_writes():
    model, inputs = model_and_batch("momentum")
    calls, _ = probe.instrument(model)
    stats = probe.chunk_stats(model, inputs, 8, calls)
    assert (stats["write"] > 1e-6).all() and (stats["|S|"] > 0).all()
    cells = probe.summary(stats, 8)
    assert len(cells) == 2 and len(cells[0]) == 4  # layers x (span, kind)


def test_the_oracle_silences_noise_chunks_only_while_it_runs(monkeypatch):
    monkeypatch.setattr(probe, "LONG", 96)
    model, _ = model_and_batch("muon_chunk")
    calls, scale = probe.instrument(model)
    recall = probe.oracle_recall(model, 8, scale, rows=4, seed=0)
    assert len(recall) == 4 and all(0 <= int(r) <= 100 for r in recall)
    assert scale["theta"] is None
    quiet = [lr for lr, _ in calls[0][-12:]]  # the last stream ran with the oracle
    assert any(lr.abs().max() == 0 for lr in quiet) and any(lr.abs().max() > 0 for lr in quiet)


def test_gate_floor_counts_the_decay_gates_of_the_first_training_length():
    model, inputs = model_and_batch("momentum")
    calls, _ = probe.instrument(model)
    probe.chunk_stats(model, torch.cat([inputs] * 3, dim=1), 8, calls)  # 144 tokens
    floors = probe.gate_floor(calls, 8)
    assert [layer for layer, _ in floors] == [0, 1]
    below_2e3, below_2e4, median = floors[0][1]
    assert 0 <= float(below_2e4[:-1]) <= float(below_2e3[:-1]) <= 100
    assert float(median) >= model.config.memory.decay_min
