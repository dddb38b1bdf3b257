"""LibreYOLO's quantization slots on the CPU: turbo_physai's kernels vs LibreYOLO's references.

    PYTHONPATH=src python benchmarks/quant_cpu.py [--threads 2] [--repeat 7]

Same run, same inputs, interleaved: each slot at the sizes a LibreYOLO QAT or finalized model
calls it with, a forward without autograd and (for the simulate slots) a training step (forward
+ backward of the quantized tensor). Figures are the best of `--repeat` timings of a loop of
calls (the least disturbed run), per call; every row also checks that the outputs (and
gradients) are bit-identical. Prints a table and writes benchmarks/results/quant_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from quant_common import CASES, environment, mismatches, references, step

from turbo_physai.ops import quant


def per_call(fn, fn_args, repeat: int, budget_s: float = 0.25) -> float:
    """Seconds per ``fn(*fn_args)``: the best of `repeat` loops of about `budget_s` each."""
    fn(*fn_args)  # warm up (allocator, first-call paths)
    start = time.perf_counter()
    fn(*fn_args)
    number = max(1, int(budget_s / max(time.perf_counter() - start, 1e-6)))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn(*fn_args)
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    refs = references()
    rows = []
    for case in CASES:
        gen = torch.Generator().manual_seed(0)
        inputs = case.make(gen, "cpu")
        ours, theirs = getattr(quant, case.slot), refs[case.slot]
        modes = [("forward", None)]
        if case.grad:
            modes.append(("train step", torch.randn_like(theirs(*inputs))))
        for mode, grad in modes:
            diff = mismatches(step(ours, inputs, grad), step(theirs, inputs, grad))
            ref_s = per_call(step, (theirs, inputs, grad), args.repeat)
            our_s = per_call(step, (ours, inputs, grad), args.repeat)
            rows.append({"case": case.label, "slot": case.slot, "mode": mode,
                         "reference_ms": ref_s * 1e3, "turbo_physai_ms": our_s * 1e3,
                         "speedup": ref_s / our_s, "mismatched_elements": diff})
            r = rows[-1]
            print(f"{r['case']:48s} {mode:10s} {r['reference_ms']:9.3f} ms "
                  f"{r['turbo_physai_ms']:8.3f} ms {r['speedup']:6.1f}x  bits differ: {diff}",
                  flush=True)
    results = {"environment": environment("cpu"),
               "command": f"PYTHONPATH=src python benchmarks/quant_cpu.py --threads "
                          f"{args.threads} --repeat {args.repeat}",
               "rows": rows}
    out = Path(__file__).parent / "results" / "quant_cpu.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
