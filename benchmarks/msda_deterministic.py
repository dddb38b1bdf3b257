"""The deterministic CUDA backward of ms_deform_attn against the default one, on one GPU.

    PYTHONPATH=src python benchmarks/msda_deterministic.py [--reps N] [--json PATH] [--profile]

For each shape of msda_cuda.py, locations uniform and local, float32 and float16: GPU time (the
profiler's kernels + memsets) of one forward + backward with float atomics (default), with
``torch.use_deterministic_algorithms(True)`` (the sorted accumulation), and with the int64
fixed-point accumulation that problems beyond the sorted path's 32-bit entry indexing get (forced
here by reporting that the sorted workspace does not apply); whether two deterministic runs are
bit-identical; the largest relative difference from the default gradients; the peak memory of a
deterministic fwd+bwd above the inputs. ``--profile`` adds the sorted path's kernel table for the
encoder shape. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from msda_common import run_once
from msda_cuda import SHAPES, gpu_ms, make_inputs, peak_mb

from turbo_physai import _core
from turbo_physai.ops import ms_deform_attn


@contextmanager
def deterministic(fixed_point=False):
    real = _core.ms_deform_attn_sorted_workspace_bytes
    if fixed_point:
        _core.ms_deform_attn_sorted_workspace_bytes = lambda *args: 0
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        _core.ms_deform_attn_sorted_workspace_bytes = real


def bench(name, locations, dtype, reps):
    args, grad = make_inputs(**SHAPES[name], locations=locations, dtype=dtype)
    row = {"shape": name, "locations": locations, "dtype": str(dtype).split(".")[-1]}
    row["default_ms"] = gpu_ms(ms_deform_attn, args, grad, True, reps)
    default = run_once(ms_deform_attn, args, grad, True)
    with deterministic():
        row["sorted_ms"] = gpu_ms(ms_deform_attn, args, grad, True, reps)
        first, second = (run_once(ms_deform_attn, args, grad, True) for _ in range(2))
    with deterministic(fixed_point=True):
        row["fixed_point_ms"] = gpu_ms(ms_deform_attn, args, grad, True, reps)
    row["sorted_bit_identical_runs"] = all(map(torch.equal, first, second))
    row["sorted_vs_default_max_rel"] = max(
        ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
        for a, b in zip(first, default, strict=True))
    with deterministic():
        row["sorted_peak_mb"] = peak_mb(ms_deform_attn, args, grad, True)
    return row


def profile_table():
    args, grad = make_inputs(**SHAPES["deformable_detr_encoder"], locations="uniform")
    with deterministic():
        run_once(ms_deform_attn, args, grad, True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                run_once(ms_deform_attn, args, grad, True)
            torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12,
                                     max_name_column_width=60)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", type=Path,
                        default=Path("benchmarks/results/msda_deterministic.json"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("msda_deterministic.py needs a GPU")
    rows = [bench(name, locations, dtype, args.reps) for name in SHAPES
            for locations in ("uniform", "local") for dtype in (torch.float32, torch.float16)]
    print("| shape | loc | dtype | default | sorted (x) | fixed point (x) | repeat bit-identical "
          "| max rel. vs default | sorted peak MiB |\n" + "|---" * 9 + "|")
    for r in rows:
        print(f"| {r['shape']} | {r['locations']} | {r['dtype']} | {r['default_ms']:.4f} "
              f"| {r['sorted_ms']:.4f} ({r['sorted_ms'] / r['default_ms']:.2f}) "
              f"| {r['fixed_point_ms']:.4f} ({r['fixed_point_ms'] / r['default_ms']:.2f}) "
              f"| {r['sorted_bit_identical_runs']} | {r['sorted_vs_default_max_rel']:.1e} "
              f"| {r['sorted_peak_mb']:.0f} |")
    if args.profile:
        print(profile_table())
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "command": " ".join(sys.argv), "units": "ms GPU, MiB"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
