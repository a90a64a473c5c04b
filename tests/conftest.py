import os

import pytest
import torch

if not torch.cuda.is_available():
    # Triton's CPU interpreter (tests/ops/test_triton.py) is chosen when triton is first
    # imported, and torch imports it (torch.compile, the flop counter): set it before anything.
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Test tensors are tiny: one thread avoids OpenMP barriers that stall for milliseconds per op
# whenever the other core is busy.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state."""
    torch.manual_seed(0)
