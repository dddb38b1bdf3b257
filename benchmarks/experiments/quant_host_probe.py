"""Host time of the pieces of a quantization slot's call on CUDA tensors, ours vs LibreYOLO's
Triton (issue 25: with the same kernel count, our int8 given-scale training step took 63 us
more than Triton's on the H200).

    PYTHONPATH=src:benchmarks python benchmarks/experiments/quant_host_probe.py

Each line: the host's time per call of a loop of back-to-back calls on a small tensor (the
GPU keeps up, so the loop measures what the host does), best of 5 loops of 2000 calls.
"""

from __future__ import annotations

import time

import torch
from quant_cuda import triton_impl
from torch.utils.dlpack import to_dlpack

from turbo_physai import _core
from turbo_physai.ops import fake_quant_int8, quant
from turbo_physai.ops._dlpack import capsules, current_stream


def host_us(fn, calls: int = 2000, loops: int = 5) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


class _Identity(torch.autograd.Function):
    """The floor: an autograd function that launches one kernel and has a trivial backward."""

    @staticmethod
    def forward(ctx, x, scale):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def main() -> None:
    w = torch.randn(64, 16, 3, 3, device="cuda")
    scale = torch.rand(64, device="cuda") + 0.1
    grad, out = torch.randn_like(w), torch.empty_like(w)
    leaf = w.detach().requires_grad_()
    triton = triton_impl("fake_quant_int8_per_channel")
    stream = current_stream(w)
    backward = _core.fake_quant_int8_per_channel_backward_cuda
    rows = {
        "to_dlpack": lambda: to_dlpack(w),
        "capsules x4": lambda: capsules(grad, w, scale, out),
        "current_stream": lambda: current_stream(w),
        "empty_like": lambda: torch.empty_like(w),
        "aten mul (one launch)": lambda: torch.mul(w, 2.0),
        # a DLPack capsule is consumed by the call that takes it: one set per call
        "core backward (binding call)": lambda: backward(*capsules(grad, w, scale, out), 0,
                                                         stream),
        "ours per_channel_backward": lambda: fake_quant_int8.per_channel_backward(
            grad, w, scale, 0),
        "floor: identity fn fwd (grad)": lambda: _Identity.apply(leaf, scale),
        "floor: identity fn fwd+grad": lambda: torch.autograd.grad(
            _Identity.apply(leaf, scale), leaf, grad),
        "ours given scale fwd (grad)": lambda: quant.fake_quant_int8_per_channel(
            leaf, 0, scale),
        "ours given scale fwd+grad": lambda: torch.autograd.grad(
            quant.fake_quant_int8_per_channel(leaf, 0, scale), leaf, grad),
        "triton given scale fwd (grad)": lambda: triton(leaf, 0, scale),
        "triton given scale fwd+grad": lambda: torch.autograd.grad(
            triton(leaf, 0, scale), leaf, grad),
        "ours amax fwd+grad": lambda: torch.autograd.grad(
            quant.fake_quant_int8_per_channel(leaf), leaf, grad),
        "triton amax fwd+grad": lambda: torch.autograd.grad(triton(leaf), leaf, grad),
    }
    for name, fn in rows.items():
        print(f"{name:36s} {host_us(fn):8.2f} us", flush=True)


if __name__ == "__main__":
    main()
