"""research/experiments/output_init_probe.py: an untrained memory with a zero last weight reads
nothing before a write and the written value after it; LeCun's last weight reads noise."""

import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import output_init_probe as probe  # noqa: E402

from titans_atlas.ops import LinearMemory, MLPMemory  # noqa: E402


def test_the_zero_started_mlp_reads_like_the_linear_memory():
    linear = probe.probe(LinearMemory(probe.DIM, probe.DIM))
    zero = probe.probe(MLPMemory(probe.DIM, probe.DIM, output_init="zero"))
    lecun = probe.probe(MLPMemory(probe.DIM, probe.DIM, output_init=1))
    half = probe.probe(MLPMemory(probe.DIM, probe.DIM, output_init=0.5))
    assert linear[0] == zero[0] == 0.0 and lecun[0] > 0.3  # the read before any write
    assert zero[2] > 0.9 and linear[2] > 0.9 and lecun[2] < 0.5  # cos(read after, value)
    assert lecun[0] > half[0] > zero[0] and lecun[2] < half[2] < zero[2]


def test_the_table_prints(capsys):
    probe.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].startswith("| memory |")
