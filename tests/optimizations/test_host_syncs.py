"""optimizations.common.host_syncs: the host synchronizations of a forward, found on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import host_module

torch = pytest.importorskip("torch")

from turbo_physai.optimizations.common.graph_checks import check_later  # noqa: E402
from turbo_physai.optimizations.common.host_syncs import HostSync, find_host_syncs  # noqa: E402

HOST = '''
import numpy as np
import torch


def syncing(x):
    n = x.sum().item()                                   # line 7
    if (x > 0).all():                                    # line 8
        x = x + n
    x.cpu()                                              # line 10
    np.asarray(x)                                        # line 11
    x.tolist()                                           # line 12
    torch.nonzero(x)                                     # line 13
    x = x[x > 1]                                         # line 14
    torch.repeat_interleave(x, torch.ones_like(x, dtype=torch.long))  # line 15
    torch.nn.functional.one_hot(x.long())                # line 16: its size from the data
    return x


def quiet(x):
    n = x.shape[0]
    y = torch.where((x > 0).all(), x, -x)
    torch.repeat_interleave(y, torch.ones(n, dtype=torch.long), output_size=n)
    torch.nn.functional.one_hot(torch.arange(n), num_classes=n)  # CUDA checks on the device
    return y[torch.arange(n)] * 2
'''


@pytest.fixture
def host(tmp_path, monkeypatch):
    yield from host_module(tmp_path, monkeypatch, "tpa_host_syncs_host", HOST)


def test_each_kind_is_found_once_with_its_line(host):
    x = torch.arange(1.0, 5.0)
    result, found = find_host_syncs(host.syncing, x)
    for _ in range(2):  # found again: one entry per operation and line
        found = find_host_syncs(host.syncing, x)[1]
    lines = [(s.operation, int(s.where.rsplit(":", 1)[1])) for s in found]
    assert lines == [
        ("a scalar read", 7), ("a scalar read", 8), ("Tensor.cpu", 10),
        ("Tensor.__array__", 11), ("Tensor.tolist", 12), ("aten.nonzero.default", 13),
        ("aten.index.Tensor with a boolean mask", 14), ("aten.repeat_interleave.Tensor", 15),
        ("a scalar read", 16)]
    assert all(s.where.startswith(host.__file__) for s in found)
    assert torch.equal(result, host.syncing(x))


def test_code_without_syncs_has_none(host):
    x = torch.arange(1.0, 5.0)
    result, found = find_host_syncs(host.quiet, x)
    assert found == [] and torch.equal(result, host.quiet(x))


def test_checks_deferred_by_design_are_left_out():
    def checked(x):
        check_later((x < 0).any(), "negative")
        return x

    assert find_host_syncs(checked, torch.ones(2))[1] == []
    assert find_host_syncs(lambda x: bool(x.any()), torch.ones(2))[1] == [
        HostSync("a scalar read", f"{__file__}:{_line_of('bool(x.any())')}")]
    assert np.asarray(torch.ones(1)).shape == (1,)  # outside the modes nothing is recorded


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "lambda" in line)
