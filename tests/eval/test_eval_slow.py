"""Long runs (``pytest -m slow``): memory stays flat over a 64K-token stream, and the memory
estimate bounds the peak a fresh process reaches."""

import subprocess
import sys

import pytest
from eval_data import SHAKESPEARE

from titans_atlas import create_model
from titans_atlas.eval.perplexity import stream_perplexity
from titans_atlas.tokenizers import ByteTokenizer

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="shared/data/tinyshakespeare is absent")
@pytest.mark.parametrize("name", ["lmm", "mac"])
def test_memory_is_flat_over_64k_tokens(name):
    model = create_model(name, preset="debug").eval()
    stats = stream_perplexity(model, ByteTokenizer(), SHAKESPEARE, max_tokens=65536, bin_size=4096)
    assert stats["tokens"] == 65535 and len(stats["curve"]) == 16
    rss = [point["rss_mib"] for point in stats["memory_trace"]]
    assert len(rss) >= 4 and max(rss) - rss[0] < 40  # MiB: no growth with position


PROBE = """
import resource, sys, torch
import titans_atlas as ta
from titans_atlas.memory_estimate.inference import estimate_peak_memory
name, length, piece = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = ta.create_model(name, dim=128, depth=2, num_heads=4, window=64, vocab_size=4096).eval()
estimate = estimate_peak_memory(model, length, piece)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
ids, state = torch.randint(0, 4096, (1, piece)), None
with torch.no_grad():
    for _ in range(length // piece):
        logits, state = model(ids, state=state)
        torch.log_softmax(logits.float(), -1)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(estimate.total - estimate.parameters, grown)
"""


@pytest.mark.parametrize("name", ["lmm", "atlas", "transformer"])
def test_estimate_bounds_the_measured_peak(name):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, name, "8192", "2048"],
        capture_output=True,
        text=True,
        check=True,
    )
    estimated, measured = map(int, out.stdout.split())
    assert measured <= estimated < 4 * measured + (64 << 20)
