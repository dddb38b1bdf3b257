"""Fixtures of the host-library catalog tests (tests/fixtures/tpa_hosts.py)."""

import pytest
from tpa_hosts import no_network, op_calls  # noqa: F401  (fixtures, found here by pytest)


@pytest.fixture
def deterministic():
    """torch's deterministic mode (warn-only) and cuDNN's, for comparing bit for bit: float
    atomics (our op's float32 backward, cuDNN's weight gradients) make even two eager runs
    differ in the last bits."""
    import torch

    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    cudnn.deterministic, cudnn.benchmark = True, False
    yield
    torch.use_deterministic_algorithms(False)
    cudnn.deterministic, cudnn.benchmark = before
