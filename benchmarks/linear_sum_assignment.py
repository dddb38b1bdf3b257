"""linear_sum_assignment: scipy on the host vs turbo_physai's CPU and CUDA solvers.

    PYTHONPATH=src python benchmarks/linear_sum_assignment.py [--device cpu|cuda] [--repeat 15]
        [--cuda-threads 0,32,128,256]

A DETR matcher's problems (queries x targets, float32 costs). Figures are per problem, the median
of `--repeat` timed loops of about 50 ms. scipy's time includes the ``.cpu()`` copy (and its
synchronization) on CUDA and the numpy conversion; ours on the CPU is the public function on a
host tensor; ours on CUDA is the public function, whose status check synchronizes like the copy
does (it would not inside a CUDA graph), and ``kernel`` is the GPU time of the op alone per
`--cuda-threads` block size (0: the kernel's choice), from CUDA events over a loop of launches.
Every row checks that the pairs equal scipy's. Prints a table and writes
benchmarks/results/linear_sum_assignment_<device>.json.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from functools import partial

import scipy
import torch
from quant_common import _cpu_model, save
from scipy.optimize import linear_sum_assignment as scipy_lsap

from turbo_physai.ops import linear_sum_assignment

SHAPES = [(300, 5), (300, 20), (300, 100), (900, 100)]
lsap = importlib.import_module("turbo_physai.ops.linear_sum_assignment")


def _nothing() -> None:
    pass


def scipy_host(cost: torch.Tensor):
    """What a matcher does: copy to the host (synchronizing a CUDA stream), solve there."""
    return scipy_lsap(cost.cpu().numpy())


def median_ms(fn, repeat: int, sync=_nothing, budget_s: float = 0.05) -> float:
    """Median over `repeat` loops of wall-clock ms per ``fn()``."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    number = max(1, int(budget_s / max(time.perf_counter() - start, 1e-6)))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times) * 1e3


def kernel_ms(cost: torch.Tensor, threads: int, repeat: int, number: int = 50) -> float:
    """Median GPU ms per launch of the op's kernel (no status check)."""
    lsap.solve_cuda(cost, threads)
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            lsap.solve_cuda(cost, threads)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def environment(device: str) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit,
            "machine": platform.machine(), "processor": _cpu_model(), "torch": torch.__version__,
            "scipy": scipy.__version__, "threads": torch.get_num_threads()}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--cuda-threads", default="0",
                        help="comma-separated block sizes for the kernel column (0: auto)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    threads = [int(t) for t in args.cuda_threads.split(",")]
    sync = torch.cuda.synchronize if cuda else _nothing
    rows = []
    header = f"{'shape':>10s} {'scipy ms':>9s} {'ours CPU':>9s}"
    if cuda:
        header += f" {'ours CUDA':>9s} " + " ".join(f"{'kernel/' + str(t):>10s}" for t in threads)
    print(header + "  same pairs")
    for shape in SHAPES:
        host = torch.rand(shape, generator=torch.Generator().manual_seed(0))
        cost = host.to(args.device)
        want = [a.tolist() for a in scipy_lsap(host.double().numpy())]
        row = {"shape": list(shape), "scipy_ms": median_ms(partial(scipy_host, cost), args.repeat),
               "turbo_physai_cpu_ms": median_ms(partial(linear_sum_assignment, host),
                                                args.repeat)}
        same = [t.tolist() for t in linear_sum_assignment(host)] == want
        if cuda:
            row["turbo_physai_cuda_ms"] = median_ms(partial(linear_sum_assignment, cost),
                                                    args.repeat, sync)
            row["kernel_ms"] = {str(t): kernel_ms(cost, t, args.repeat) for t in threads}
            same &= all([a.tolist() for a in lsap.solve_cuda(cost, t)[:2]] == want
                        for t in threads)
        row["same_pairs_as_scipy"] = same
        rows.append(row)
        line = (f"{'x'.join(map(str, shape)):>10s} {row['scipy_ms']:9.3f} "
                f"{row['turbo_physai_cpu_ms']:9.3f}")
        if cuda:
            line += f" {row['turbo_physai_cuda_ms']:9.3f} " + " ".join(
                f"{row['kernel_ms'][str(t)]:10.3f}" for t in threads)
        print(f"{line}  {same}", flush=True)
    command = (f"PYTHONPATH=src python benchmarks/linear_sum_assignment.py --device "
               f"{args.device} --repeat {args.repeat}"
               + (f" --cuda-threads {args.cuda_threads}" if cuda else ""))
    save(f"linear_sum_assignment_{args.device}", rows, command, environment(args.device))


if __name__ == "__main__":
    main()
