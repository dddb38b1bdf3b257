"""ms_deform_attn under torch.func.vmap against one call per entry, on the CPU.

    PYTHONPATH=src python benchmarks/msda_vmap.py [--reps N] [--json PATH]

Two entry sizes, float32, 1 thread: 64 tiny entries (value (1, 20, 8, 32): one 4x5 level; 10
queries, 4 points) and 8 DETR-decoder-like ones (value (2, 1050, 8, 32): one 25x42 level; 300
queries). Each is timed vmapped (one call for the batch: the op's batching rule), as a Python loop
of plain calls (the eager fast path) and as a loop of custom-op calls (close to what torch's
per-entry vmap fallback ran before the op had a batching rule). Median milliseconds of N repeats.
Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from turbo_physai.ops import ms_deform_attn

ENTRIES = {"64 tiny entries": (64, 1, (4, 5), 10), "8 decoder-like entries": (8, 2, (25, 42), 300)}


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def timings(b, n, level, lq, reps, m=8, d=32, p=4):
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor([list(level)])
    starts = torch.zeros(1, dtype=torch.int64)
    value = torch.randn(b, n, level[0] * level[1], m, d, generator=gen)
    loc = torch.rand(b, n, lq, m, 1, p, 2, generator=gen)
    attn = torch.rand(b, n, lq, m, 1, p, generator=gen)
    op = torch.ops.turbo_physai.ms_deform_attn

    def one(v, lo, a):
        return ms_deform_attn(v, shapes, starts, lo, a)

    return {
        "vmap_ms": median_ms(lambda: torch.func.vmap(one)(value, loc, attn), reps),
        "loop_plain_ms": median_ms(lambda: [one(value[i], loc[i], attn[i]) for i in range(b)],
                                   reps),
        "loop_op_ms": median_ms(
            lambda: [op(value[i], shapes, starts, loc[i], attn[i]) for i in range(b)], reps),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json", type=Path,
                        default=Path(__file__).parent / "results" / "msda_vmap.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {name: timings(*spec, args.reps) for name, spec in ENTRIES.items()}
    print("| entries | vmap ms | loop of plain calls ms | loop of op calls ms |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['vmap_ms']:.3f} | {r['loop_plain_ms']:.3f} | {r['loop_op_ms']:.3f} |")
    args.json.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
