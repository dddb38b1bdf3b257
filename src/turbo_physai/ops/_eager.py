"""When an op call may skip torch's dispatcher and call its kernels directly (eager fast path).

A ``torch.library`` custom op is what graphs, fake tensors, modes and transforms need, but in
plain eager execution its Python machinery (schema defaults, the autograd wrapper, redispatch,
the dynamo-disable wrapper) costs several times what the binding call itself does on small
inputs (benchmarks/host_overhead.py). These flags say whether anything
besides plain eager execution would see the call, each read from torch's C state (about 0.04 us
each on the 2-core dev box).
"""

from __future__ import annotations

import torch
from torch.autograd import profiler as _profiler

_C = torch._C


def dispatcher_needed() -> bool:
    """True where a call must go through the custom op: under ``torch.compile``/``torch.export``
    tracing (first: dynamo folds it to a constant and reads nothing else), ``torch.jit.trace``
    and ONNX export, an active ``TorchDispatchMode`` (FakeTensorMode, make_fx's proxy mode, user
    modes), an active ``TorchFunctionMode`` (make_fx pre-dispatch, ``with torch.device(...)``),
    or a ``torch.func`` transform (vmap, grad...). Tensor subclasses are the caller's to rule out
    (``type(t) is torch.Tensor``), and so is autocast (``_C._is_any_autocast_enabled()``): an op
    with an autocast kernel casts its inputs the same way before taking the fast path."""
    return (torch.compiler.is_compiling() or _C._is_tracing()
            or _C._len_torch_dispatch_stack() > 0 or _C._is_torch_function_mode_enabled()
            or _C._are_functorch_transforms_active())


def profiled(name: str, fn, *args):
    """``fn(*args)``, recorded as ``name`` when the autograd profiler runs (so profiles name a
    fast-path call as they name the op). The flag is a module attribute, one lookup per call."""
    if _profiler._is_profiler_enabled:
        with torch.profiler.record_function(name):
            return fn(*args)
    return fn(*args)
