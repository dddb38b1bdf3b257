"""Where a forward would make the host wait for the GPU, found on any device (issue 29).

A CUDA graph cannot capture a forward that reads device data on the host, and ``torch.compile``
breaks its graph there. Which statements do is a property of the code, not of the device, so
:func:`find_host_syncs` finds them on the CPU too (the tests of the capture groups run there;
capture itself needs a GPU): it runs a function once under torch's function and dispatch modes
and records each operation that, on a GPU, copies device data to the host or waits for it:

- a scalar read (``.item()``, ``bool()``/``if tensor``, ``float()``, ``int()``);
- ``.cpu()``, ``.numpy()``, ``.tolist()``, ``np.asarray(tensor)``;
- operations whose output size depends on the data (``nonzero``, ``masked_select``,
  ``unique``, ``bincount``, ``repeat_interleave`` without ``output_size``, indexing or index
  writes with a boolean mask).

Each is reported once per (operation, source line): the first frame outside torch and this
package. Reads made by :func:`graph_checks.check_later` and :func:`host_transfers.host_item`
are left out: under a capture those defer or serve their value by design. So are the range
checks of ``one_hot`` with ``num_classes`` given, which torch makes on the CPU and leaves to a
device assert on CUDA.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class HostSync(NamedTuple):
    """An operation that makes the host wait for the device, and the model line that ran it."""

    operation: str
    where: str


_READS = {"cpu", "numpy", "tolist", "__array__"}
_DATA_SIZED = {"aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default",
               "aten.unique_dim.default", "aten.unique_consecutive.default",
               "aten.bincount.default", "aten.repeat_interleave.Tensor"}
_MASKED = {"aten.index.Tensor", "aten.index_put.default", "aten.index_put_.default",
           "aten._index_put_impl_.default"}
_SKIPPED_DIRS = (os.path.dirname(torch.__file__),
                 os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
_BY_DESIGN = {("graph_checks.py", "check_later"), ("host_transfers.py", "host_item")}


def find_host_syncs(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, list[HostSync]]:
    """``fn(*args, **kwargs)``'s result, and the host synchronizations it made, in order."""
    found = _Found()
    with _Reads(found), _Dispatch(found):
        result = fn(*args, **kwargs)
    return result, list(found)


class _Found(dict):
    """The syncs found (keys, in order); ``quiet``: inside an op whose CPU reads CUDA skips."""

    quiet = 0


def _record(found: _Found, operation: str) -> None:
    if found.quiet:
        return
    stack = traceback.extract_stack()
    if any((os.path.basename(f.filename), f.name) in _BY_DESIGN for f in stack):
        return
    frames = [f for f in stack if not f.filename.startswith(_SKIPPED_DIRS)]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    found.setdefault(HostSync(operation, where), None)


class _Reads(TorchFunctionMode):
    def __init__(self, found: _Found):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in _READS:
            _record(self.found, f"Tensor.{func.__name__}")
        if func is torch.nn.functional.one_hot and \
                (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) > 0:
            self.found.quiet += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.found.quiet -= 1
        return func(*args, **kwargs)


class _Dispatch(TorchDispatchMode):
    def __init__(self, found: _Found):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name == "aten._local_scalar_dense.default":
            _record(self.found, "a scalar read")
        elif name in _DATA_SIZED and not (name == "aten.repeat_interleave.Tensor"
                                          and kwargs.get("output_size") is not None):
            _record(self.found, name)
        elif name in _MASKED and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in (args[1] if len(args) > 1 else ())):
            _record(self.found, f"{name} with a boolean mask")
        return func(*args, **kwargs)
