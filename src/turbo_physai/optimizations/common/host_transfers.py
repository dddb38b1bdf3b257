"""Host data that a captured forward sends to the device, served from device copies made while
warming up (``cuda_graph.py``; issue 27).

A CUDA graph cannot capture a copy from pageable host memory (it synchronizes), and model code
makes such copies on its host-side arithmetic: Ultralytics' RT-DETR indexes with a host
``torch.arange``, RF-DETR moves ``torch._shape_as_tensor`` to the device, transformers builds
spatial shapes with ``torch.as_tensor(list, device=...)`` or writes them element by element.
Their values come from host state alone (no device data can reach the host without a
synchronization, which capture forbids too), so within one call signature they are the same on
every call.

:class:`HostTransfers` watches the forward twice. While :meth:`~HostTransfers.recording` (the
last warm-up, eager), every host tensor an operation hands to the device is copied there
explicitly, and the operation runs on that copy; host and device copies are kept in order.
While :meth:`~HostTransfers.serving` (the capture), the n-th such tensor must equal the n-th
recorded one (shape, dtype, bits) and the operation reads the recorded device copy, which the
graph then reads on every replay: the object keeps it alive as long as the graph. A difference
in count or value raises :class:`TransferMismatch` (the capture fails; the signature runs
eagerly, saying why) instead of freezing a value that changes.

What counts as a transfer: a host tensor of one or more dimensions among the arguments of an
operation that involves the device (a device tensor among its arguments, or ``device=`` the
device), and any host tensor copied to the device (``_to_copy``, ``copy_``; 0-dim ones too,
where other operations read host scalars as kernel arguments). ``torch.tensor``,
``torch.as_tensor`` and ``torch.asarray`` of host data with ``device=`` the device build on the
host first, then copy: the copy is then seen.

Reading such data back is a synchronization too, which capture forbids: LibreYOLO's Deformable
DETR iterates over the spatial-shapes tensor it just built (``for h, w in shapes:
torch.linspace(0.5, h - 0.5, h)``). The device tensors made from host data alone are *host-made*:
the transfers' device copies, the results of deterministic operations whose tensor inputs are all
host-made or on the host (factories such as ``torch.arange(n, device=...)`` included; random
ones never), and their views; an in-place write of anything else into one ends that. A host-made
value is the same on every call of a signature (what it comes from was checked equal, or is the
code's own constants, which the graph freezes too), so its reads back (``.item()``, and what
calls it: ``int()``, ``__index__``, a tensor where a number is wanted; ``.cpu()``, ``.tolist()``)
are recorded while warming up and served, in order and counted, under capture. A read of
anything else still synchronizes, and the capture fails naming its line. Tensors of more than
``TRACKED_NUMEL`` elements are not followed (positional encodings made from host masks, say):
reads of shapes and counts are what capture meets, and the tracked ones are kept alive, so that
no other tensor can take their memory while tracked.
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_COPIES = {"aten._to_copy.default", "aten.copy_.default", "aten.copy.default"}
_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
_ITEM = torch.ops.aten._local_scalar_dense.default
_TO_COPY = torch.ops.aten._to_copy.default
TRACKED_NUMEL = 1 << 16


class TransferMismatch(RuntimeError):
    """The host data sent to the device differs between the recording and the capture."""


class HostTransfers:
    """The host tensors one forward sends to ``device``, recorded once and served to a capture."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.host: list[torch.Tensor] = []
        self.on_device: list[torch.Tensor] = []
        self._serving = False
        self._next = 0
        self.items: list = []
        self._next_item = 0
        self._made: dict[int, torch.Tensor] = {}  # storage object -> a host-made tensor on it

    @contextlib.contextmanager
    def recording(self):
        """Run the forward eagerly, recording (and explicitly copying) its transfers."""
        self.host, self.on_device, self.items, self._serving = [], [], [], False
        try:
            with _Factories(self), _Dispatch(self), _active(self):
                yield self
        finally:
            self._made.clear()

    @contextlib.contextmanager
    def serving(self):
        """Run the forward (under capture) with its transfers served from the recording."""
        self._serving, self._next, self._next_item = True, 0, 0
        for copy in self.on_device:
            self._mark(copy)
        try:
            with _Factories(self), _Dispatch(self), _active(self):
                yield self
            if self._next != len(self.host):
                raise TransferMismatch(
                    f"the forward sent {self._next} host tensors to {self.device} under capture, "
                    f"{len(self.host)} while warming up: its host code took another path")
            if self._next_item != len(self.items):
                raise TransferMismatch(
                    f"the forward read {self._next_item} host-made values back under capture, "
                    f"{len(self.items)} while warming up: its host code took another path")
        finally:
            self._serving = False
            self._made.clear()

    def host_made(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` (on the device) holds data made from host data alone."""
        return isinstance(tensor, torch.Tensor) and _address(tensor) in self._made

    def _mark(self, tensor: torch.Tensor) -> None:
        address = _address(tensor)
        if address and tensor.numel() <= TRACKED_NUMEL:
            self._made[address] = tensor

    def _track(self, func, args, kwargs, out) -> None:
        """Host-made outputs of ``func``; host-made tensors it writes anything else into are no
        longer."""
        seen = {_address(t) for t in pytree.tree_leaves((args, kwargs))
                if isinstance(t, torch.Tensor) and t.device.type != "cpu"}
        if torch.Tag.nondeterministic_seeded in func.tags or not seen <= self._made.keys():
            for t in _written(func, args, kwargs):
                self._made.pop(_address(t), None)
            return
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and _is_device(t.device, self.device) \
                    and _address(t) not in seen:
                self._mark(t)

    def _read_back(self, func, args, kwargs):
        """A host-made value read back: read and recorded, or (under capture) served."""
        def read():
            value = func(*args, **kwargs)
            if isinstance(value, torch.Tensor) and args[0].is_cuda:
                torch.cuda.current_stream(args[0].device).synchronize()  # non_blocking copies
            return value

        return self._recorded(read, f" ({func})")

    def _recorded(self, read, what: str = ""):
        """``read()`` while recording, kept (a tensor as a copy); under capture the kept values
        in order, counted (more reads than while warming up raise TransferMismatch)."""
        if not self._serving:
            value = read()
            self.items.append(value.clone() if isinstance(value, torch.Tensor) else value)
            return value
        n = self._next_item
        if n >= len(self.items):
            raise TransferMismatch(f"host-made value #{n} read under capture{what}; warming up "
                                   f"read {len(self.items)}: its host code took another path")
        self._next_item += 1
        value = self.items[n]
        return value.clone() if isinstance(value, torch.Tensor) else value

    def _on_device(self, host: torch.Tensor, op: str) -> torch.Tensor:
        if not self._serving:
            self.host.append(host.clone())
            self.on_device.append(host.to(self.device))
            self._mark(self.on_device[-1])
            return self.on_device[-1]
        n = self._next
        if n >= len(self.host):
            raise TransferMismatch(
                f"{op} sent host tensor #{n} to {self.device} under capture; warming up sent "
                f"{len(self.host)}: its host code took another path")
        if not _same(self.host[n], host):
            raise TransferMismatch(
                f"{op} sent host tensor #{n} {tuple(host.shape)} {host.dtype} to {self.device} "
                f"with other values than while warming up: host data that changes from call to "
                f"call cannot be replayed")
        self._next += 1
        return self.on_device[n]

    def _item(self, tensor: torch.Tensor):
        if self.host_made(tensor):  # followed: the dispatch mode records or serves the read
            return tensor.item()
        return self._recorded(tensor.item)

    def _involves_device(self, args, kwargs) -> bool:
        if _is_device(kwargs.get("device"), self.device):
            return True
        return any(isinstance(t, torch.Tensor) and _is_device(t.device, self.device)
                   for t in pytree.tree_leaves((args, kwargs)))


_local = threading.local()


@contextlib.contextmanager
def _active(transfers: HostTransfers):
    previous = getattr(_local, "transfers", None)
    _local.transfers = transfers
    try:
        yield
    finally:
        _local.transfers = previous


def host_item(tensor: torch.Tensor, host_made: bool):
    """``tensor.item()``, for a value that ``host_made`` says was computed from host data alone
    (sent to the device by the forward itself): while a forward is recorded, read and kept;
    while it is captured, the kept value (its inputs were checked equal as transfers, so it is
    the same), without the synchronization a capture forbids."""
    transfers = getattr(_local, "transfers", None)
    if host_made and transfers is not None and _is_device(tensor.device, transfers.device):
        return transfers._item(tensor)
    return tensor.item()


def _address(tensor: torch.Tensor) -> int:
    """The address of the tensor's storage object (views share it; meta tensors have one too),
    0 for a tensor without one (sparse): never followed."""
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return 0


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors ``func`` writes into (in-place and ``out=`` arguments)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            written += [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    return written


def _is_device(device, target: torch.device) -> bool:
    if device is None:
        return False
    device = torch.device(device)
    return device.type == target.type and (device.index is None or target.index is None
                                           or device.index == target.index)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return bool(((a == b) | (a != a) & (b != b)).all()) if a.is_floating_point() else False


class _Dispatch(TorchDispatchMode):
    def __init__(self, transfers: HostTransfers):
        super().__init__()
        self.transfers = transfers

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        transfers = self.transfers
        if _reads_back(func, args, kwargs) and transfers.host_made(args[0]):
            return transfers._read_back(func, args, kwargs)
        if transfers._involves_device(args, kwargs) and not _writes_host(func, args, kwargs):
            op = str(func)
            copy = op in _COPIES

            def moved(value):
                if isinstance(value, torch.Tensor) and value.device.type == "cpu" \
                        and (copy or value.dim() > 0):
                    return transfers._on_device(value, op)
                return value

            args, kwargs = pytree.tree_map(moved, (args, kwargs))
        out = func(*args, **kwargs)
        transfers._track(func, args, kwargs, out)
        return out


def _reads_back(func, args, kwargs) -> bool:
    """``.item()`` of a device tensor, or its copy to the host (``.cpu()``, ``.tolist()``)."""
    if not args or not isinstance(args[0], torch.Tensor) or args[0].device.type == "cpu":
        return False
    if func is _ITEM:
        return True
    return func is _TO_COPY and torch.device(kwargs.get("device") or args[0].device).type == "cpu"


def _writes_host(func, args, kwargs) -> bool:
    """Whether ``func`` writes into a host tensor (a copy to the host, say): left as it is, never
    redirected to a device copy (capture then fails with torch's own error)."""
    return any(t.device.type == "cpu" for t in _written(func, args, kwargs))


class _Factories(TorchFunctionMode):
    """``torch.tensor(data, device=<the device>)`` and its kin: built on the host, then copied
    (the copy inside the factory is invisible to a dispatch mode)."""

    def __init__(self, transfers: HostTransfers):
        super().__init__()
        self.transfers = transfers

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _FACTORIES:
            data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
            on_device = isinstance(data, torch.Tensor) and data.device.type != "cpu"
            if _is_device(kwargs.get("device"), self.transfers.device) and not on_device \
                    and not kwargs.get("requires_grad", False):
                device = kwargs.pop("device")
                host = func(*args, **kwargs, device="cpu")
                return host.to(device)
        return func(*args, **kwargs)

