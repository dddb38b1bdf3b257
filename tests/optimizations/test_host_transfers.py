"""optimizations.common.host_transfers on the CPU, with the ``meta`` device standing in for the
GPU (a host tensor handed to a meta operation is the transfer a capture cannot take). The values
served on a real GPU: tests/optimizations/test_cuda_graph.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from turbo_physai.optimizations.common.host_transfers import (  # noqa: E402
    TRACKED_NUMEL,
    HostTransfers,
    TransferMismatch,
    _writes_host,
    host_item,
)

META = torch.device("meta")


def forward(x, rows=None):
    """Host data to the device the ways model code does it."""
    rows = x.shape[0] if rows is None else rows
    sizes = torch.as_tensor([(rows, x.shape[1])], dtype=torch.long, device=x.device)
    sizes[0, 0] = rows + 1  # a host int into a device tensor
    sizes = sizes + torch._shape_as_tensor(x).to(x.device)
    picked = x[torch.arange(rows - 1, -1, -1)]  # a host index
    scale = torch.tensor(2.0, device=x.device) * torch.asarray([1.0], device=x.device)
    local = torch.arange(3) * 2  # host only: not a transfer
    return picked * scale, sizes, local


def test_recording_copies_each_host_tensor_once_in_order():
    x = torch.empty(4, 3, device=META)
    transfers = HostTransfers(META)
    with transfers.recording():
        picked, sizes, local = forward(x)
    assert picked.device == META and sizes.device == META and local.device.type == "cpu"
    want = [torch.tensor([[4, 3]]), torch.tensor([4, 3]), torch.tensor([3, 2, 1, 0]),
            torch.tensor(2.0), torch.tensor([1.0])]
    assert len(transfers.host) == len(want) == len(transfers.on_device)
    for got, expected, copy in zip(transfers.host, want, transfers.on_device, strict=True):
        assert got.dtype == expected.dtype and torch.equal(got, expected)
        assert copy.device == META and copy.shape == got.shape


def test_serving_the_same_host_data_passes_and_can_repeat():
    x = torch.empty(4, 3, device=META)
    transfers = HostTransfers(META)
    with transfers.recording():
        forward(x)
    for _ in range(2):
        with transfers.serving():
            picked, sizes, _ = forward(x)
        assert picked.shape == (4, 3) and sizes.device == META


def test_other_values_under_capture_raise_naming_the_tensor():
    x = torch.empty(4, 3, device=META)
    transfers = HostTransfers(META)
    with transfers.recording():
        forward(x)
    with pytest.raises(TransferMismatch, match=r"host tensor #0 \(1, 2\) torch.int64 to meta "
                                               r"with other values than while warming up"):
        with transfers.serving():
            forward(x, rows=3)


def test_more_or_fewer_transfers_under_capture_raise():
    transfers = HostTransfers(META)
    with transfers.recording():
        torch.as_tensor([1], device=META)
    with pytest.raises(TransferMismatch, match="sent host tensor #1 to meta under capture; "
                                               "warming up sent 1"):
        with transfers.serving():
            torch.as_tensor([1], device=META)
            torch.as_tensor([1], device=META)
    with pytest.raises(TransferMismatch, match="sent 0 host tensors to meta under capture, 1 "
                                               "while warming up"):
        with transfers.serving():
            pass


def test_nan_equals_nan_but_not_another_dtype():
    transfers = HostTransfers(META)
    with transfers.recording():
        torch.tensor([float("nan"), 1.0], device=META)
    with transfers.serving():
        torch.tensor([float("nan"), 1.0], device=META)
    with pytest.raises(TransferMismatch, match="torch.float64"):
        with transfers.serving():
            torch.tensor([float("nan"), 1.0], dtype=torch.float64, device=META)


def test_what_is_not_a_transfer_is_left_alone():
    on_meta = torch.ones(2, device=META)
    transfers = HostTransfers(META)
    with transfers.recording():
        torch.as_tensor(on_meta, device=META)  # already there
        torch.tensor([1.0, 2.0], device=META, requires_grad=True)  # a leaf: built as asked
        torch.ones(3) + torch.arange(3)  # host only
        on_meta + torch.tensor(3.0)  # a host scalar: a kernel argument, not a copy
    assert transfers.host == []


def test_writes_into_host_tensors_are_never_redirected():
    host, device = torch.zeros(2), torch.zeros(2, device=META)
    copy_ = torch.ops.aten.copy_.default
    assert _writes_host(copy_, (host, device), {})
    assert not _writes_host(copy_, (device, host), {})
    assert not _writes_host(torch.ops.aten.add.Tensor, (device, host), {})


class _Count:
    """A value on the (meta) device that can be read: what a box count is on a GPU."""

    device = torch.device(META)

    def __init__(self):
        self.reads = 0

    def item(self):
        self.reads += 1
        return 3.0


def test_host_made_values_are_read_back_once_and_then_served():
    transfers, count = HostTransfers(META), _Count()
    with transfers.recording():
        assert host_item(count, True) == 3.0
        assert host_item(count, False) == 3.0  # not host-made: read, not kept
    assert transfers.items == [3.0] and count.reads == 2
    with transfers.serving():
        assert host_item(count, True) == 3.0 and count.reads == 2  # served, not read
    with pytest.raises(TransferMismatch, match="read 0 host-made values back under capture, 1"):
        with transfers.serving():
            pass
    assert host_item(count, True) == 3.0 and count.reads == 3  # nothing recorded: a real read


def test_what_is_made_from_host_data_alone_is_followed_through_operations():
    x = torch.empty(4, 3, device=META)  # a model tensor
    transfers = HostTransfers(META)
    with transfers.recording():
        shapes = torch.as_tensor([(4, 3), (2, 2)], dtype=torch.long, device=META)
        height, width = shapes[0]  # views
        span = torch.arange(5, device=META) - 0.5  # a factory with host arguments, then arithmetic
        starts = (shapes[:, 0] * shapes[:, 1]).cumsum(0)
        mixed = x.sum() + span.sum()  # a model tensor among the inputs
        noise = torch.rand(3, device=META)  # random: another value on every call
        big = torch.zeros(TRACKED_NUMEL + 1, device=META)  # too large to follow
        made = [shapes, height, width, span, starts]
        assert all(transfers.host_made(t) for t in made)
        assert not any(transfers.host_made(t) for t in (x, mixed, noise, big))
        starts.add_(x[:2, 0].long())  # a write of model data: no longer host-made, nor its views
        assert not transfers.host_made(starts) and not transfers.host_made(starts[:1])
        shapes[1, 1] = 7  # a host value written in: still host-made
        assert transfers.host_made(shapes)
        sparse = torch.sparse_coo_tensor(  # no storage: never followed
            torch.zeros(2, 1, dtype=torch.long, device=META), torch.ones(1, device=META), (2, 2),
            check_invariants=False)
        assert not transfers.host_made(sparse)
        w = torch.empty(3, device=META, requires_grad=True)  # a backward runs through it too
        (grad,) = torch.autograd.grad((x * w * span[:3]).sum(), w)
        assert not transfers.host_made(grad)
    assert not transfers.host_made(shapes)  # forgotten once the forward is done
