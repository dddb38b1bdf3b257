"""Modulated deformable conv on CPU: the mmcv.mdc replacement vs the straightforward version.

"Straightforward" is the tap-by-tap formulation of mmcv's math that stands in for mmcv's kernel
in the test fixtures (tests/fixtures/openmmlab/mmcv/_ext.py): per kernel tap and deform group,
a bilinear sample by advanced indexing, then an einsum per convolution group. The replacement
builds all im2col columns with four gathers and does one batched matmul. Both run in float32,
forward alone and forward + backward, in one run; the outputs are compared before timing.
Prints a table, writes JSON.

    PYTHONPATH=src python benchmarks/mdc_cpu.py [--repeat R] [--threads T] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "fixtures" / "openmmlab"))
from mmcv._ext import modulated_deform_conv as straightforward  # noqa: E402

from turbo_physai.optimizations.common.mmcv.mdc import modulated_deform_conv2d  # noqa: E402

# name: (N, C, H, W, Cout, k, stride, groups, deform_groups)
CASES = {
    "DCNv2 3x3, 64ch, 32x32, N=2": (2, 64, 32, 32, 64, 3, 1, 1, 1),
    "DCNv2 3x3, 128ch, 24x24, N=2, dg=4": (2, 128, 24, 24, 128, 3, 1, 1, 4),
    "DCNv2 3x3 s2, 64ch, 48x48, N=1, g=2": (1, 64, 48, 48, 64, 3, 2, 2, 1),
}


def inputs(n, c, h, w, c_out, k, stride, groups, dg):
    gen = torch.Generator().manual_seed(0)
    ho, wo = (h + 2 - k) // stride + 1, (w + 2 - k) // stride + 1
    return [
        torch.randn(n, c, h, w, generator=gen),
        torch.randn(n, dg * 2 * k * k, ho, wo, generator=gen) * 2,
        torch.rand(n, dg * k * k, ho, wo, generator=gen),
        torch.randn(c_out, c // groups, k, k, generator=gen) * 0.05,
        torch.randn(c_out, generator=gen),
    ], (stride, 1, 1, groups, dg)


def ours(tensors, params):
    return modulated_deform_conv2d(*tensors, *params)


def reference(tensors, params):
    stride, pad, dil, groups, dg = params
    k = tensors[3].shape[2]
    return straightforward(*tensors, k, k, stride, stride, pad, pad, dil, dil, groups, dg)


def timed(fns, tensors, params, backward, repeat):
    """Best time in ms of each function. Runs are interleaved and the minimum is kept: on a
    shared machine other processes only ever add time, so the minimum is the least noisy."""
    leaves = [t.detach().requires_grad_(backward) for t in tensors]
    samples = [[] for _ in fns]
    for _ in range(repeat + 1):  # the first round warms up allocators and is dropped
        for fn, times in zip(fns, samples, strict=True):
            t0 = time.perf_counter()
            out = fn(leaves, params)
            if backward:
                out.sum().backward()
            times.append(time.perf_counter() - t0)
    return [min(times[1:]) * 1e3 for times in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "mdc_cpu.json"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    rows = []
    for name, shape in CASES.items():
        tensors, params = inputs(*shape)
        with torch.no_grad():
            diff = (ours(tensors, params) - reference(tensors, params)).abs().max().item()
        row = {"case": name, "max_abs_diff": diff}
        for mode, backward in (("forward", False), ("train", True)):
            with torch.set_grad_enabled(backward):
                mine, ref = timed((ours, reference), tensors, params, backward, args.repeat)
            row[f"{mode}_ours_ms"], row[f"{mode}_ref_ms"] = mine, ref
            row[f"{mode}_speedup"] = row[f"{mode}_ref_ms"] / row[f"{mode}_ours_ms"]
        rows.append(row)

    print("| case | fwd ours (ms) | fwd ref (ms) | x | fwd+bwd ours (ms) | fwd+bwd ref (ms) | x |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['forward_ours_ms']:.2f} | {r['forward_ref_ms']:.2f} | "
            f"{r['forward_speedup']:.2f} | {r['train_ours_ms']:.2f} | {r['train_ref_ms']:.2f} | "
            f"{r['train_speedup']:.2f} |"
        )
    print("max |ours - ref| per case:", ", ".join(f"{r['max_abs_diff']:.1e}" for r in rows))
    result = {
        "benchmark": "mdc_cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
