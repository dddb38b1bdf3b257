"""Where a LibreYOLO quantization slot's training step spends its time on a GPU: ours vs
LibreYOLO's Triton kernel (issue 25: our training steps lost to Triton on 8 of 10 rows).

    PYTHONPATH=src:benchmarks python benchmarks/experiments/quant_train_probe.py [--cases 0,2]

For each case of benchmarks/quant_common.py picked (indices): the training step's time split
into forward-with-grad alone and the whole step (CUDA events, 50 back-to-back calls, best of 5),
then a profiler table (CPU and CUDA activity) of 10 steps per implementation, sorted by CPU time.
"""

from __future__ import annotations

import argparse

import torch
from quant_common import CASES, references, step
from quant_cuda import gpu_ms, triton_impl

from turbo_physai.ops import quant


def forward_with_grad(fn, *args):
    """The step's forward alone (gpu_ms runs a call without a gradient under no_grad)."""
    with torch.enable_grad():
        return fn(args[0].detach().requires_grad_(), *args[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="0,1,2,3,7")
    args = parser.parse_args()
    refs = references()
    for index in map(int, args.cases.split(",")):
        case = CASES[index]
        inputs = case.make(torch.Generator().manual_seed(0), "cuda")
        grad = torch.randn_like(refs[case.slot](*inputs))
        impls = {"ours": getattr(quant, case.slot), "triton": triton_impl(case.slot),
                 "reference": refs[case.slot]}
        print(f"\n### {case.label}")
        for name, fn in impls.items():
            if fn is None:
                continue
            fwd = gpu_ms(lambda *a, fn=fn: forward_with_grad(fn, *a), inputs, None, 50, 5)
            whole = gpu_ms(fn, inputs, grad, 50, 5)
            print(f"{name:9s} forward with grad {fwd:.3f} ms, training step {whole:.3f} ms")
        for name in ("ours", "triton"):
            fn = impls[name]
            if fn is None:
                continue
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    step(fn, inputs, grad)
                torch.cuda.synchronize()
            print(f"--- {name}, 10 steps")
            print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=18,
                                            max_name_column_width=60))


if __name__ == "__main__":
    main()
