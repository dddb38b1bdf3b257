"""benchmarks/msda_cpu.py: the C++ ms_deform_attn against the grid_sample formulation, on the CPU.

Run from the repository root after a developer build:

    PYTHONPATH=src python benchmarks/msda_cpu.py [--reps 30] [--json PATH]

Time: both implementations run in the same process with torch's default thread count, in blocks
of consecutive calls (each after a warm-up call), alternating three times between the two so that
a change of load on the box hits both. A figure is the minimum (and the median) over all calls.
Blocks rather than call-by-call interleaving: each implementation is timed in its own steady
state; right after a reference call (whose backward dirties ~80 MB) ours ran 2x slower.
"fwd+bwd" is one forward plus ``torch.autograd.grad`` of value, sampling_locations and
attention_weights for a random grad_output (no ``.grad`` accumulation in the timing).

Memory: each (implementation, size, pass) runs once more in a fresh subprocess. After a warm-up
call and ``malloc_trim``, the peak resident set is reset (``/proc/self/clear_refs`` = 5) and the
figure is ``VmHWM - VmRSS`` around one call: the peak of everything the call allocates, its results
included (the output; for fwd+bwd also the three gradients). Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from msda_common import run_once

from turbo_physai.ops import ms_deform_attn, ms_deform_attn_reference

IMPLS = {"turbo_physai": ms_deform_attn, "grid_sample reference": ms_deform_attn_reference}
LEVELS_640 = [(80, 80), (40, 40), (20, 20)]  # strides 8, 16, 32 of a 640x640 input
SIZES = {
    # A decoder layer: 300 object queries over the three levels, batch 2.
    "decoder": {"batch": 2, "queries": 300, "levels": LEVELS_640},
    # An encoder layer: every pixel of every level is a query. Batch 1 to fit a 2-core box.
    "encoder": {"batch": 1, "queries": sum(h * w for h, w in LEVELS_640), "levels": LEVELS_640},
}
HEADS, CHANNELS, POINTS = 8, 32, 4


def make_inputs(batch, queries, levels, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = torch.tensor(levels, dtype=torch.int64)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    s = int(shapes.prod(1).sum())
    value = torch.randn(batch, s, HEADS, CHANNELS, generator=gen)
    loc = torch.rand(batch, queries, HEADS, len(levels), POINTS, 2, generator=gen)
    attn = torch.rand(batch, queries, HEADS, len(levels), POINTS, generator=gen)
    attn = attn.flatten(-2).softmax(-1).view_as(attn)
    grad = torch.randn(batch, queries, HEADS * CHANNELS, generator=gen)
    return value, shapes, starts, loc, attn, grad


def time_size(size, reps, rounds=3):
    *args, grad = make_inputs(**SIZES[size])
    rows = []
    for backward in (False, True):
        samples = {name: [] for name in IMPLS}
        for _ in range(rounds):
            for name, fn in IMPLS.items():
                run_once(fn, args, grad, backward)  # warm-up
                for _ in range(max(1, reps // rounds)):
                    start = time.perf_counter()
                    run_once(fn, args, grad, backward)
                    samples[name].append((time.perf_counter() - start) * 1e3)
        ours, ref = samples["turbo_physai"], samples["grid_sample reference"]
        rows.append({"size": size, "pass": "fwd+bwd" if backward else "fwd",
                     **{f"{name} min ms": min(v) for name, v in samples.items()},
                     **{f"{name} median ms": statistics.median(v) for name, v in samples.items()},
                     "speed-up (min)": min(ref) / min(ours),
                     "speed-up (median)": statistics.median(ref) / statistics.median(ours)})
    return rows


def _kib(field):
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def peak_extra_mib(impl, size, backward):
    """Runs in a subprocess (see --child): peak resident memory one call adds, in MiB."""
    *args, grad = make_inputs(**SIZES[size])
    fn = IMPLS[impl]
    run_once(fn, args, grad, backward)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    result = run_once(fn, args, grad, backward)
    peak = _kib("VmHWM")
    del result
    return (peak - before) / 1024


def memory_rows():
    rows = []
    for size, cfg in SIZES.items():
        out_mib = cfg["batch"] * cfg["queries"] * HEADS * CHANNELS * 4 / 2**20
        for backward in (False, True):
            row = {"size": size, "pass": "fwd+bwd" if backward else "fwd",
                   "output MiB": round(out_mib, 2)}
            for impl in IMPLS:
                child = subprocess.run(
                    [sys.executable, __file__, "--child", impl, size, str(int(backward))],
                    check=True, capture_output=True, text=True)
                row[f"{impl} peak extra MiB"] = round(float(child.stdout.strip()), 2)
            rows.append(row)
    return rows


def print_table(title, rows):
    print(f"\n{title}")
    keys = list(rows[0])
    widths = [max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys]
    print("  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True)))
    for r in rows:
        print("  ".join(_fmt(r[k]).ljust(w) for k, w in zip(keys, widths, strict=True)))


def _fmt(x):
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", default="benchmarks/results/msda_cpu.json")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        impl, size, backward = opts.child
        print(peak_extra_mib(impl, size, backward == "1"))
        return

    timing = []
    for size in SIZES:
        reps = opts.reps if size == "decoder" else max(3, opts.reps // 6)
        timing += time_size(size, reps)
    load = os.getloadavg()[0]
    memory = memory_rows()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor()}"
          f" {platform.machine()}; M={HEADS} D={CHANNELS} P={POINTS}, levels {LEVELS_640};"
          f" 1-min load average {load:.2f} after the timing")
    print_table("Time (ms)", timing)
    print_table("Peak extra resident memory of one call (MiB)", memory)
    path = Path(opts.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "machine": platform.machine(), "load_average": load,
        "sizes": SIZES, "heads": HEADS, "channels": CHANNELS, "points": POINTS,
        "timing": timing, "memory": memory}, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
