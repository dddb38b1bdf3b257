"""benchmarks/msda_mixed_precision.py: ms_deform_attn on CUDA under mixed precision, on one GPU.

Build first (as for msda_cuda.py), then run from the repository root:

    PYTHONPATH=src python benchmarks/msda_mixed_precision.py [--reps 20] [--json PATH]

Under autocast a model hands the op a float16/bfloat16 value (a linear projection) with float32
locations and weights. Two ways to run that call, on issue 6's shapes (uniform locations):
"promoted" casts value to float32 first and runs the float32 kernels (what autocast does to
grid_sample, and what the op did before it took a 16-bit value with float32 locations; the cast
is inside the timed call, its gradient cast back by autograd), "mixed" hands the 16-bit value to
the kernels as it is. Figures: GPU busy time of forward and forward+backward (profiler: kernels,
memsets, casts), the peak memory of a forward+backward above the inputs, and the memory a
forward keeps for the backward (what a training step holds per layer until its backward runs),
besides the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from msda_common import run_once
from msda_cuda import SHAPES, gpu_ms, make_inputs, peak_mb

from turbo_physai.ops import ms_deform_attn


def promoted(value, shapes, starts, loc, attn):
    return ms_deform_attn(value.float(), shapes, starts, loc, attn)


WAYS = {"promoted": promoted, "mixed": ms_deform_attn}


def held_mb(fn, args):
    """MiB a forward with autograd keeps beyond its inputs and output (its saved tensors)."""
    value, shapes, starts, loc, attn = args
    leaves = [t.detach().requires_grad_() for t in (value, loc, attn)]
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    out = fn(leaves[0], shapes, starts, leaves[1], leaves[2])
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base - out.numel() * out.element_size()
    del out
    return held / 2**20


def bench(name, spec, low, reps):
    args, grad = make_inputs(**spec, locations="uniform")  # float32
    args[0] = args[0].to(low)
    row = {"shape": name, "value_dtype": str(low).removeprefix("torch.")}
    outputs = {}
    for way, fn in WAYS.items():
        outputs[way] = run_once(fn, args, grad, False)
        row[way] = {"fwd_gpu_ms": gpu_ms(fn, args, grad, False, reps),
                    "fwd_bwd_gpu_ms": gpu_ms(fn, args, grad, True, reps),
                    "fwd_bwd_peak_mib": peak_mb(fn, args, grad, True),
                    "held_for_backward_mib": held_mb(fn, args)}
    row["max_abs_diff_out"] = (outputs["mixed"] - outputs["promoted"]).abs().max().item()
    return row


def table(rows):
    lines = ["| shape | value | fwd GPU ms promoted / mixed | fwd+bwd GPU ms promoted / mixed "
             "| peak MiB promoted / mixed | held for backward MiB promoted / mixed |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        p, m = r["promoted"], r["mixed"]
        lines.append(
            f"| {r['shape']} | {r['value_dtype']} "
            f"| {p['fwd_gpu_ms']:.4f} / {m['fwd_gpu_ms']:.4f} "
            f"({p['fwd_gpu_ms'] / m['fwd_gpu_ms']:.2f}x) "
            f"| {p['fwd_bwd_gpu_ms']:.4f} / {m['fwd_bwd_gpu_ms']:.4f} "
            f"({p['fwd_bwd_gpu_ms'] / m['fwd_bwd_gpu_ms']:.2f}x) "
            f"| {p['fwd_bwd_peak_mib']:.0f} / {m['fwd_bwd_peak_mib']:.0f} "
            f"| {p['held_for_backward_mib']:.0f} / {m['held_for_backward_mib']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--json", type=Path,
                        default=Path("benchmarks/results/msda_mixed_precision.json"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("msda_mixed_precision.py needs a GPU")
    rows = []
    for name in args.shapes:
        for low in (torch.float16, torch.bfloat16):
            rows.append(bench(name, SHAPES[name], low, args.reps))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "command": " ".join(sys.argv), "units": "ms, MiB"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
