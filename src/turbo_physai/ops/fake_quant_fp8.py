"""``torch.ops.turbo_physai.fake_quant_fp8``: the C++ CPU / CUDA kernels as a torch custom op.

A ``torch.library`` custom op with a fake implementation, so it stays inside ``torch.compile``
and ``torch.export`` graphs, and a straight-through autograd formula. float32 inputs run the
native kernels; other floating dtypes run the reference math (same result, no fast path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from turbo_physai import _core
from turbo_physai.kernels import reference
from turbo_physai.ops._dlpack import capsules

_NAME = "turbo_physai::fake_quant_fp8"


@torch.library.custom_op(_NAME, mutates_args=())
def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    reference.check_fake_quant_fp8(x, scale, _NAME)
    native = x.dtype == torch.float32 and scale.dtype == torch.float32
    if not native or x.device.type not in ("cpu", "cuda"):
        return reference.fake_quant_fp8_forward(x, scale).contiguous()
    x = x.contiguous()
    flat_scale = scale.reshape(-1).contiguous()
    out = torch.empty_like(x)
    if x.device.type == "cpu":
        _core.fake_quant_fp8_cpu(*capsules(x, flat_scale, out))
    elif _core.cuda_kernels:
        stream = torch.cuda.current_stream(x.device).cuda_stream
        _core.fake_quant_fp8_cuda(*capsules(x, flat_scale, out), stream)
    else:
        return reference.fake_quant_fp8_forward(x, scale).contiguous()
    return out


@fake_quant_fp8.register_fake
def _(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    reference.check_fake_quant_fp8(x, scale, _NAME)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return grad, None  # straight-through to x; the scale gets no gradient


fake_quant_fp8.register_autograd(_backward)


def register_kernels(register: Callable[..., None]) -> None:
    """Built-in provider hook (turbo_physai.kernels.providers.BUILTIN)."""
    op = torch.ops.turbo_physai.fake_quant_fp8.default
    register("fake_quant_fp8", op, name="cpp", requires={"device": "cpu", "dtype": "float32"})
    if _core.cuda_kernels and torch.cuda.is_available():
        register("fake_quant_fp8", op, name="cuda", requires={"device": "cuda", "dtype": "float32"})
