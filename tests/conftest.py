import pytest
import torch

# Test tensors are tiny: one thread avoids OpenMP barriers that stall for milliseconds per op
# whenever the other core is busy.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state."""
    torch.manual_seed(0)
