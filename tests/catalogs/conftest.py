"""Fixtures of the host-library catalog tests (tests/fixtures/tpa_hosts.py)."""

import pytest
from tpa_hosts import no_network, op_calls  # noqa: F401  (fixtures, found here by pytest)


@pytest.fixture
def deterministic():
    """torch's deterministic mode (warn-only) and cuDNN's, for comparing bit for bit: float
    atomics (our op's float32 backward, cuDNN's weight gradients) make even two eager runs
    differ in the last bits. Attention runs torch's math kernels: the flash and memory-efficient
    backwards have no deterministic mode (RT-DETR's decoder under bfloat16 autocast)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    cudnn.deterministic, cudnn.benchmark = True, False
    with sdpa_kernel(SDPBackend.MATH):
        yield
    torch.use_deterministic_algorithms(False)
    cudnn.deterministic, cudnn.benchmark = before
