"""LibreYOLO's quantization slots on the CPU: turbo_physai's kernels vs LibreYOLO's references.

    PYTHONPATH=src python benchmarks/quant_cpu.py [--threads 2] [--repeat 7] [--only TEXT]

Same run, same inputs, interleaved: each slot at the sizes a LibreYOLO QAT or finalized model
calls it with, a forward without autograd and (for the simulate slots) a training step (forward
+ backward of the quantized tensor). Figures are the best of `--repeat` timings of a loop of
calls (the least disturbed run), per call, both wall-clock and process CPU time (all threads,
OpenMP's spin-waits included): on a shared machine other processes stretch the wall-clock
figures, so the JSON records the load average too, and `--threads 1` gives CPU times that
other processes hardly move (on a shared box, compare those; on a quiet one, pin two cores:
`taskset -c 0,1 ... --threads 2`). Every row also checks that the outputs (and gradients) are
bit-identical. Prints a table and writes benchmarks/results/quant_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from quant_common import CASES, environment, mismatches, references, save, step

from turbo_physai.ops import quant


def per_call(fn, fn_args, repeat: int, budget_s: float = 0.1) -> tuple[float, float]:
    """Wall-clock and process CPU seconds per ``fn(*fn_args)``: the best of `repeat` loops of
    about `budget_s` each."""
    fn(*fn_args)  # warm up (allocator, first-call paths)
    start = time.perf_counter()
    fn(*fn_args)
    number = max(1, int(budget_s / max(time.perf_counter() - start, 1e-6)))
    wall = cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(number):
            fn(*fn_args)
        cpu = min(cpu, (time.process_time() - start_cpu) / number)
        wall = min(wall, (time.perf_counter() - start) / number)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--name", default="quant_cpu",
                        help="results file: benchmarks/results/<name>.json")
    parser.add_argument("--only", default="",
                        help="the cases whose label contains this text (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    refs = references()
    rows = []
    load = os.getloadavg()
    print(f"{'case':48s} {'mode':10s} {'wall ms: reference  ours':>26s} | "
          f"{'CPU ms: reference  ours':>25s} | bits differ")
    for case in (c for c in CASES if args.only in c.label):
        gen = torch.Generator().manual_seed(0)
        inputs = case.make(gen, "cpu")
        ours, theirs = getattr(quant, case.slot), refs[case.slot]
        modes = [("forward", None)]
        if case.grad:
            modes.append(("train step", torch.randn_like(theirs(*inputs))))
        for mode, grad in modes:
            diff = mismatches(step(ours, inputs, grad), step(theirs, inputs, grad))
            ref_wall, ref_cpu = per_call(step, (theirs, inputs, grad), args.repeat)
            our_wall, our_cpu = per_call(step, (ours, inputs, grad), args.repeat)
            rows.append({"case": case.label, "slot": case.slot, "mode": mode,
                         "reference_ms": ref_wall * 1e3, "turbo_physai_ms": our_wall * 1e3,
                         "speedup": ref_wall / our_wall,
                         "reference_cpu_ms": ref_cpu * 1e3, "turbo_physai_cpu_ms": our_cpu * 1e3,
                         "cpu_time_speedup": ref_cpu / our_cpu, "mismatched_elements": diff})
            r = rows[-1]
            print(f"{r['case']:48s} {mode:10s} {r['reference_ms']:8.2f} {r['turbo_physai_ms']:7.2f}"
                  f" {r['speedup']:5.1f}x | {r['reference_cpu_ms']:8.2f} "
                  f"{r['turbo_physai_cpu_ms']:7.2f} {r['cpu_time_speedup']:5.1f}x | {diff}",
                  flush=True)
    save(args.name, rows, f"PYTHONPATH=src python benchmarks/quant_cpu.py --threads "
         f"{args.threads} --repeat {args.repeat} --name {args.name}"
         + (f" --only '{args.only}'" if args.only else ""),
         {**environment("cpu"), "load_average_1m_start": load[0],
          "load_average_1m_end": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
