"""Host-side costs a user pays on every process and every small op call.

    PYTHONPATH=src python benchmarks/host_overhead.py [--calls N] [--json PATH]

- import: ``python -X importtime -c "import turbo_physai"``, cumulative microseconds of the
  package, median of 5 fresh interpreters;
- a tiny ms_deform_attn call on the CPU (one 2x2 level, one query: the kernel is negligible, so
  this is the Python + binding path), median over repeats, with tensors and with DLPack capsules
  handed to the binding directly.
Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.dlpack import to_dlpack

from turbo_physai import _core
from turbo_physai.ops import ms_deform_attn


def import_us() -> float:
    samples = []
    for _ in range(5):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import turbo_physai"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        line = next(x for x in err.splitlines() if x.rstrip().endswith("| turbo_physai"))
        samples.append(float(line.split("|")[1]))
    return statistics.median(samples)


def per_call_us(fn, calls: int, repeat: int = 7) -> float:
    for _ in range(200):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument(
        "--json", default=str(Path(__file__).parent / "results" / "host_overhead.json")
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes, starts = torch.tensor([[2, 2]]), torch.tensor([0])
    v, loc, w = torch.randn(1, 4, 1, 4), torch.rand(1, 1, 1, 1, 1, 2), torch.rand(1, 1, 1, 1, 1)
    out = torch.empty(1, 1, 1, 4)
    rows = {
        "import turbo_physai (us)": import_us(),
        "ms_deform_attn tiny call (us)": per_call_us(
            lambda: ms_deform_attn(v, shapes, starts, loc, w), args.calls
        ),
        "binding, tensors (us)": per_call_us(
            lambda: _core.ms_deform_attn_forward(v, shapes, starts, loc, w, out, 1), args.calls
        ),
        "binding, DLPack capsules (us)": per_call_us(
            lambda: _core.ms_deform_attn_forward(
                *map(to_dlpack, (v, shapes, starts, loc, w, out)), 1
            ),
            args.calls,
        ),
    }
    for name, value in rows.items():
        print(f"{name:<34}{value:>10.1f}")
    Path(args.json).write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "python": platform.python_version(),
                "torch": torch.__version__,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
