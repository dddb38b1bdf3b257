"""LibreYOLO's quantization slots on a GPU: turbo_physai vs LibreYOLO's Triton kernels and its
references, same run, same inputs.

    PYTHONPATH=src python benchmarks/quant_cuda.py [--repeat 7] [--iters 50]

Needs a GPU, triton and libreyolo. For each slot at the sizes a LibreYOLO QAT or finalized model
calls it with: a forward without autograd and (simulate slots) a training step (forward +
backward of the quantized tensor), timed with CUDA events over `--iters` back-to-back calls
(host launch cost included, as a training loop sees it), best of `--repeat`. Triton autotunes on
its first calls, which the warm-up covers. Each row also counts elements whose bits differ from
LibreYOLO's reference on the same GPU, for ours and for Triton (LibreYOLO's Triton kernels fall
back to its reference for inputs they do not take). Prints a table and writes
benchmarks/results/quant_cuda.json.
"""

from __future__ import annotations

import argparse
import importlib

import torch
from quant_common import CASES, environment, mismatches, references, save, step

from turbo_physai import _core
from turbo_physai.ops import quant

# LibreYOLO's Triton implementation of each slot (libreyolo/kernels/quant/...), if it has one.
TRITON = {
    "fake_quant_fp8": ("simulate.fp8", "fake_quant_fp8"),
    "fake_quant_int8_per_channel": ("simulate.int8_per_channel", "fake_quant_int8_per_channel"),
    "fake_quant_int_grouped": ("simulate.int_grouped", "fake_quant_int_grouped"),
    "fake_quant_nvfp4_weight": ("simulate.nvfp4_weight", "fake_quant_nvfp4_weight"),
    "fake_quant_nvfp4_dynamic": ("simulate.nvfp4_dynamic", "fake_quant_nvfp4_dynamic"),
    "fake_quant_mxfp4_weight": ("simulate.mxfp4", "fake_quant_mxfp4_weight"),
    "fake_quant_mxfp4_dynamic": ("simulate.mxfp4", "fake_quant_mxfp4_dynamic"),
    "unpack_int_grouped": ("execute.unpack_int_grouped", "unpack_int_grouped"),
    "unpack_nvfp4": ("execute.unpack_nvfp4", "unpack_nvfp4"),
}
def triton_impl(slot: str):
    if slot not in TRITON:
        return None
    module, name = TRITON[slot]
    return getattr(importlib.import_module(f"libreyolo.kernels.quant.{module}"), name)


def gpu_ms(fn, args, grad, iters: int, repeat: int) -> float:
    for _ in range(5):  # warm-up: allocator, Triton autotuning and compilation
        step(fn, args, grad)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(repeat):
        start.record()
        for _ in range(iters):
            step(fn, args, grad)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / iters)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    if not (torch.cuda.is_available() and _core.cuda_kernels):
        raise SystemExit("needs a GPU and a CUDA build of turbo_physai")
    refs = references()
    rows = []
    header = (f"{'case':48s} {'mode':10s} {'reference':>10s} {'triton':>10s} {'ours':>10s} "
              f"{'vs triton':>9s} {'vs ref':>7s}  bits differ (ours / triton)")
    print(header)
    for case in CASES:
        inputs = case.make(torch.Generator().manual_seed(0), "cuda")
        ours, theirs, triton = getattr(quant, case.slot), refs[case.slot], triton_impl(case.slot)
        modes = [("forward", None)]
        if case.grad:
            modes.append(("train step", torch.randn_like(theirs(*inputs))))
        for mode, grad in modes:
            want = step(theirs, inputs, grad)
            row = {"case": case.label, "slot": case.slot, "mode": mode,
                   "reference_ms": gpu_ms(theirs, inputs, grad, args.iters, args.repeat),
                   "turbo_physai_ms": gpu_ms(ours, inputs, grad, args.iters, args.repeat),
                   "ours_mismatched_elements": mismatches(step(ours, inputs, grad), want)}
            if triton is not None:
                row["triton_ms"] = gpu_ms(triton, inputs, grad, args.iters, args.repeat)
                row["triton_mismatched_elements"] = mismatches(step(triton, inputs, grad), want)
                row["speedup_vs_triton"] = row["triton_ms"] / row["turbo_physai_ms"]
            row["speedup_vs_reference"] = row["reference_ms"] / row["turbo_physai_ms"]
            rows.append(row)
            tri = f"{row['triton_ms']:8.3f}ms" if triton is not None else f"{'-':>10s}"
            vs_tri = f"{row['speedup_vs_triton']:8.2f}x" if triton is not None else f"{'-':>9s}"
            print(f"{case.label:48s} {mode:10s} {row['reference_ms']:8.3f}ms {tri} "
                  f"{row['turbo_physai_ms']:8.3f}ms {vs_tri} {row['speedup_vs_reference']:6.2f}x"
                  f"  {row['ours_mismatched_elements']} / "
                  f"{row.get('triton_mismatched_elements', '-')}", flush=True)
    save("quant_cuda", rows, f"PYTHONPATH=src python benchmarks/quant_cuda.py --repeat "
         f"{args.repeat} --iters {args.iters}", environment("cuda"))


if __name__ == "__main__":
    main()
