"""The deterministic CUDA backward of ms_deform_attn against the default one, on one GPU.

    PYTHONPATH=src python benchmarks/msda_deterministic.py [--reps N] [--json PATH] [--profile]

For each shape of msda_cuda.py, locations uniform and local, float32 and float16: GPU time (the
profiler's kernels + memsets) of one forward and of one forward + backward with float atomics
(default), and of forward + backward with ``torch.use_deterministic_algorithms(True)`` under
each way of summing grad_value: the sorted accumulation's two schemes, "corners" (an entry per
point and corner) and "anchors" (an entry per point, four slot sums per run; the kernels pick
by density, "auto" below), and the int64 fixed-point accumulation that problems beyond the
sorted path's 32-bit indexing get (forced here by reporting that the sorted workspace does not
apply). Ratios are of the backward alone (fwd+bwd minus fwd) and of fwd+bwd. Also: whether two
runs of the automatic choice are bit-identical, its largest relative difference from the default
gradients, and each scheme's peak memory above the inputs. ``--profile`` adds kernel tables
(PROFILED: both schemes on the encoder, the per-corner scheme on the decoders). Prints a table,
writes JSON.
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
from turbo_physai.ops import _msda_kernels, ms_deform_attn

#: The deterministic accumulations compared; "auto" is the sorted one the kernels pick.
SCHEMES = ("corners", "anchors")
ACCUMULATIONS = ("auto", *SCHEMES, "fixed_point")


@contextmanager
def deterministic(accumulation="auto"):
    real = _core.ms_deform_attn_sorted_workspace_bytes
    if accumulation == "fixed_point":
        _core.ms_deform_attn_sorted_workspace_bytes = lambda *args: 0
    else:
        _msda_kernels.sorted_scheme = accumulation
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        _core.ms_deform_attn_sorted_workspace_bytes = real
        _msda_kernels.sorted_scheme = "auto"


def picked_scheme(args):
    """The scheme the kernels pick for these inputs ("auto")."""
    value, _, _, loc, _ = args
    n, s, m, _ = value.shape
    _, lq, _, levels, points, _ = loc.shape
    return _core.ms_deform_attn_sorted_scheme(n, s, m, lq, levels, points)


def bench(name, locations, dtype, reps):
    args, grad = make_inputs(**SHAPES[name], locations=locations, dtype=dtype)
    row = {"shape": name, "locations": locations, "dtype": str(dtype).split(".")[-1],
           "auto_scheme": picked_scheme(args)}
    row["forward_ms"] = gpu_ms(ms_deform_attn, args, grad, False, reps)
    row["default_ms"] = gpu_ms(ms_deform_attn, args, grad, True, reps)
    default = run_once(ms_deform_attn, args, grad, True)
    for accumulation in ACCUMULATIONS:
        with deterministic(accumulation):
            row[f"{accumulation}_ms"] = gpu_ms(ms_deform_attn, args, grad, True, reps)
            if accumulation in SCHEMES:
                row[f"{accumulation}_peak_mb"] = peak_mb(ms_deform_attn, args, grad, True)
    with deterministic():
        first, second = (run_once(ms_deform_attn, args, grad, True) for _ in range(2))
    row["auto_bit_identical_runs"] = all(map(torch.equal, first, second))
    row["auto_vs_default_max_rel"] = max(
        ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
        for a, b in zip(first, default, strict=True))
    return row


def ratios(row, accumulation):
    """(backward, fwd+bwd) time of `accumulation` over the default's."""
    total = row[f"{accumulation}_ms"]
    return ((total - row["forward_ms"]) / (row["default_ms"] - row["forward_ms"]),
            total / row["default_ms"])


#: (shape, scheme) pairs whose kernels --profile lists: both schemes on the encoder, and the
#: decoders' per-corner scheme (block sorts).
PROFILED = (("deformable_detr_encoder", "corners"), ("deformable_detr_encoder", "anchors"),
            ("deformable_detr_decoder", "corners"), ("rt_detr_decoder", "corners"))


def profile_table(shape, accumulation):
    args, grad = make_inputs(**SHAPES[shape], locations="uniform")
    with deterministic(accumulation):
        run_once(ms_deform_attn, args, grad, True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                run_once(ms_deform_attn, args, grad, True)
            torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14,
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
    print("| shape | loc | dtype | fwd | default fwd+bwd | "
          + " | ".join(f"{a} fwd+bwd (x bwd, x fwd+bwd)" for a in ACCUMULATIONS)
          + " | auto is | auto repeat bit-identical | auto max rel. vs default "
          "| peak MiB corners / anchors |\n" + "|---" * (9 + len(ACCUMULATIONS)) + "|")
    for r in rows:
        cells = []
        for a in ACCUMULATIONS:
            backward, total = ratios(r, a)
            cells.append(f"{r[f'{a}_ms']:.4f} ({backward:.2f}, {total:.2f})")
        print(f"| {r['shape']} | {r['locations']} | {r['dtype']} | {r['forward_ms']:.4f} "
              f"| {r['default_ms']:.4f} | " + " | ".join(cells)
              + f" | {r['auto_scheme']} | {r['auto_bit_identical_runs']} "
              f"| {r['auto_vs_default_max_rel']:.1e} "
              f"| {r['corners_peak_mb']:.0f} / {r['anchors_peak_mb']:.0f} |")
    if args.profile:
        for shape, accumulation in PROFILED:
            print(f"{shape}, uniform, float32, {accumulation} (5 runs):")
            print(profile_table(shape, accumulation))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "command": " ".join(sys.argv), "units": "ms GPU, MiB"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
