"""Shared by benchmarks/msda_cpu.py and benchmarks/msda_cuda.py."""

import torch


def run_once(fn, args, grad, backward):
    """One forward (no autograd) or one forward + backward of value, locations and weights."""
    value, shapes, starts, loc, attn = args
    if not backward:
        with torch.no_grad():
            return fn(value, shapes, starts, loc, attn)
    leaves = [t.detach().requires_grad_() for t in (value, loc, attn)]
    out = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
    return torch.autograd.grad(out, leaves, grad)
