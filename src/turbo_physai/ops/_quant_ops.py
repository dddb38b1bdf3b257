"""What the quantization ops share: when to take the eager fast path, threads, streams, ops.

Every quantization op is a ``torch.library`` custom op (graphs, fake tensors, modes and
transforms see it), and its front calls the same kernel functions directly where nothing but
plain eager execution would see the call (``ops/_eager.py``): on small tensors torch's custom-op
machinery costs more than the kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from turbo_physai import _core
from turbo_physai.kernels._torch import exporting
from turbo_physai.ops._dlpack import current_stream
from turbo_physai.ops._eager import dispatcher_needed

_Tensor = torch.Tensor
_FLOAT32 = torch.float32
_STRIDED = torch.strided

__all__ = ["call", "define", "fast", "grad_needed", "native", "portable_only"]


def portable_only() -> bool:
    """True under ``torch.jit.trace`` and TorchScript-based ONNX export: the fronts then run the
    portable formulation (its ``torch.fake_quantize_*`` become QuantizeLinear/DequantizeLinear).
    Not asked while dynamo traces (it cannot read the exporter's flags): our ops stay in
    ``torch.compile``/``torch.export`` graphs."""
    return not torch.compiler.is_compiling() and exporting()


def native(*tensors: torch.Tensor | None, cuda: bool = True) -> bool:
    """True where the kernels take these tensors as they are: dense float32 tensors on the CPU
    (or CUDA, where the op has CUDA kernels), all on one device. None entries are skipped."""
    device = None
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, _Tensor) or t.dtype is not _FLOAT32 or t.layout is not _STRIDED:
            return False  # (sparse and mkldnn tensors: the reference's steps decide, issue 24)
        if device is None:
            device = t.device
            if not (t.is_cpu or (cuda and t.is_cuda)):
                return False
        elif t.device != device:
            return False
    return True


def fast(*tensors: torch.Tensor | None) -> bool:
    """True where the eager fast path may call the kernel functions directly: nothing but plain
    eager execution sees the call and every tensor is a plain ``torch.Tensor``."""
    return not dispatcher_needed() and all(t is None or type(t) is _Tensor for t in tensors)


def grad_needed(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def call(name: str, on: torch.Tensor, *args):
    """``_core.<name>_cuda(*args, stream)`` on the caller's current stream of a CUDA tensor
    `on`, else ``_core.<name>_cpu(*args, threads)`` on torch's thread count: the two bindings of
    a kernel take the same arguments before those."""
    if on.is_cuda:
        return getattr(_core, name + "_cuda")(*args, current_stream(on))
    return getattr(_core, name + "_cpu")(*args, torch.get_num_threads())


def define(name: str, schema: str, cpu: Callable, cuda: Callable | None, fake: Callable):
    """A custom op running ``cpu``/``cuda`` on tensors of that device, with a fake."""
    op = torch.library.custom_op(name, cpu, mutates_args=(), device_types="cpu", schema=schema)
    if cuda is not None:
        op.register_kernel("cuda", cuda)
    op.register_fake(fake)
    return op
