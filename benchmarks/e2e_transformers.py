"""benchmarks/e2e_transformers.py: whole transformers models, stock against the transformers
catalog's MSDA groups, inference and a training step, in one run.

Run from the repository root after a developer build:

    PYTHONPATH=src python benchmarks/e2e_transformers.py [--device cpu|cuda] [--reps 5]
        [--models deformable_detr,rt_detr] [--size small] [--json PATH]

Models: ``turbo_physai.zoo`` (random init from transformers configs, no download), batch 2,
float32, eval mode (no dropout). "training step" is forward plus backward of the sum of the
outputs, no optimizer step. Time: per model, blocks of ``reps`` timed runs (after a warm-up
run) alternate stock / optimized three times, applying and rolling back the groups between
blocks, so a change of load on the box hits both sides; a figure is the minimum (and the
median) over all timed runs of a side. The outputs of both sides are compared (max abs
difference) in the same run. CUDA runs synchronize around every timed run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import turbo_physai as tpa
from turbo_physai import zoo

ROUNDS = 3
PASSES = {"inference": False, "training step": True}


def measure(name: str, size: str, device: str, reps: int) -> dict:
    built = zoo.build(name, size, device=device)
    groups = list(built.groups)
    times: dict[str, dict[str, list[float]]] = {
        side: {p: [] for p in PASSES} for side in ("stock", "ours")
    }
    stock_out = zoo.run(built)
    with tpa.applied(groups=groups, strict=True):
        ours_out = zoo.run(built)
    for _ in range(ROUNDS):
        for side in ("stock", "ours"):
            if side == "ours":
                tpa.apply(groups=groups, strict=True)
            try:
                for label, train in PASSES.items():
                    times[side][label] += zoo.time_ms(built, train=train, reps=reps)
            finally:
                tpa.rollback()
    diff = max(float((a - b).abs().max()) for a, b in zip(stock_out, ours_out, strict=True))
    row = {"model": name, "groups": groups, "max_abs_diff": diff}
    for label in PASSES:
        a, b = times["stock"][label], times["ours"][label]
        row[label] = {
            "stock_min_ms": min(a), "ours_min_ms": min(b),
            "stock_median_ms": statistics.median(a), "ours_median_ms": statistics.median(b),
            "speedup_min": min(a) / min(b),
        }
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--size", default="small", choices=["tiny", "small"])
    parser.add_argument("--models", default=",".join(zoo.MODELS))
    parser.add_argument("--json", help="default: benchmarks/results/e2e_transformers_<device>.json")
    args = parser.parse_args()

    rows = []
    for name in args.models.split(","):
        start = time.perf_counter()
        try:
            rows.append(measure(name, args.size, args.device, args.reps))
        except ImportError as err:  # Mask2Former needs scipy to build
            print(f"{name}: skipped ({err})".replace("\n", " "), file=sys.stderr)
            continue
        print(f"{name}: measured in {time.perf_counter() - start:.0f} s", file=sys.stderr)

    print(f"\n{args.device}, {args.size} models, batch 2, float32; ms = min over "
          f"{ROUNDS}x{args.reps} runs (median)\n")
    print("| model | pass | stock ms | ours ms | speed-up | max abs diff |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        for label in PASSES:
            t = r[label]
            print(f"| {r['model']} | {label} "
                  f"| {t['stock_min_ms']:.1f} ({t['stock_median_ms']:.1f}) "
                  f"| {t['ours_min_ms']:.1f} ({t['ours_median_ms']:.1f}) "
                  f"| {t['speedup_min']:.2f}x | {r['max_abs_diff']:.1e} |")

    out = Path(args.json or f"benchmarks/results/e2e_transformers_{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None},
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "size": args.size, "reps": args.reps, "rounds": ROUNDS, "results": rows,
    }, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
