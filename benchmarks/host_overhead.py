"""Host-side costs a user pays on every process and every small op call.

    PYTHONPATH=src python benchmarks/host_overhead.py [--device cpu|cuda] [--calls N] [--json PATH]

- import (CPU runs): ``python -X importtime -c "import turbo_physai"``, cumulative microseconds
  of the package, median of 5 fresh interpreters;
- ms_deform_attn, forward without autograd and forward + backward (``torch.autograd.grad`` of
  value, locations and weights, with a preallocated output gradient), through
  (a) ``turbo_physai.ops.ms_deform_attn``, the public function (in plain eager execution its
  fast path), (b) ``torch.ops.turbo_physai.ms_deform_attn``, the custom op (dispatcher and
  registered autograd), (c) the binding alone (``_core``, DLPack capsules, outputs allocated
  once); and for scale (d) a do-nothing ``torch.autograd.Function`` through the same
  ``autograd.grad`` call: what torch's autograd costs by itself; (e) and (f): (a) and (b) under
  ``torch.autocast`` to bfloat16 with a bfloat16 value and float32 locations and weights (what a
  model under mixed precision passes).

CPU: a tiny call (one 2x2 level, one query: the kernel is negligible), 1 thread; microseconds per
call, median of 7 repeats. CUDA: a DETR-decoder-sized call (value (2, 22223, 8, 32), levels
(100, 167), (50, 84), (25, 42), (13, 21), 300 queries, 4 points, float32); "host" is the wall
time of N calls with no synchronization between them and one at the end, divided by N (median of
5 repeats), "event" the median CUDA-event time around each call (the call's span on the stream,
launch gaps included); milliseconds per call. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import contextlib
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

RESULTS = Path(__file__).parent / "results"
DECODER_LEVELS = ((100, 167), (50, 84), (25, 42), (13, 21))


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


def cpu_us(fn, calls: int, repeat: int = 7) -> float:
    for _ in range(200):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def cuda_ms(fn, calls: int, repeat: int = 5) -> tuple[float, float]:
    """(host, event) milliseconds per call; see the module doc."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) / calls * 1e3)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(calls)]
    for begin, end in events:
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(walls), statistics.median(b.elapsed_time(e) for b, e in events)


def inputs(device: str):
    """value, spatial_shapes, level_start_index, locations, weights; tiny on the CPU."""
    gen = torch.Generator().manual_seed(0)
    levels, n, lq, m, d, p = ((2, 2),), 1, 1, 1, 4, 1
    if device == "cuda":
        levels, n, lq, m, d, p = DECODER_LEVELS, 2, 300, 8, 32, 4
    shapes = torch.tensor(levels)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    s = int(shapes.prod(1).sum())
    value = torch.randn(n, s, m, d, generator=gen)
    loc = torch.rand(n, lq, m, len(levels), p, 2, generator=gen)
    weights = torch.rand(n, lq, m, len(levels), p, generator=gen)
    return [t.to(device) for t in (value, shapes, starts, loc, weights)]


class _Noop(torch.autograd.Function):
    """(d): autograd's own cost, for scale: outputs of the right shapes, no computation."""

    @staticmethod
    def forward(ctx, value, loc, weights, out_shape):
        ctx.shapes = value, loc, weights
        return value.new_empty(out_shape)

    @staticmethod
    def backward(ctx, grad):
        return (*(torch.empty_like(t) for t in ctx.shapes), None)


def calls(device: str) -> dict[str, object]:
    """Row name -> a no-argument callable making one call."""
    value, shapes, starts, loc, weights = inputs(device)
    n, _, m, d = value.shape
    out_shape = (n, loc.shape[1], m * d)
    grad = torch.randn(out_shape, device=device)
    leaves = [t.detach().requires_grad_() for t in (value, loc, weights)]
    out4 = value.new_empty((n, loc.shape[1], m, d))
    grads = [torch.empty_like(t) for t in (value, loc, weights)]
    tail = (torch.cuda.current_stream().cuda_stream,) if device == "cuda" else (1,)
    suffix = "_cuda" if device == "cuda" else ""
    forward = getattr(_core, "ms_deform_attn_forward" + suffix)
    backward = getattr(_core, "ms_deform_attn_backward" + suffix)
    # float32: no workspace, bound or flags
    no_scratch = (None, None, None) if device == "cuda" else ()

    def binding_forward():
        forward(*map(to_dlpack, (value, shapes, starts, loc, weights, out4)), *tail)

    def binding_forward_backward():
        binding_forward()
        backward(*map(to_dlpack, (value, shapes, starts, loc, weights, out4, *grads)),
                 *no_scratch, *tail)

    # (e), (f): a bfloat16 value with the float32 locations and weights, under autocast
    low = [leaves[0].detach().bfloat16().requires_grad_(), leaves[1], leaves[2]]

    def through(fn, inputs=leaves, autocast=False):
        def context():
            if autocast:
                return torch.autocast(device, dtype=torch.bfloat16)
            return contextlib.nullcontext()

        def forward_only():
            with torch.no_grad(), context():
                fn(inputs[0], shapes, starts, inputs[1], inputs[2])

        def forward_backward():
            with context():
                out = fn(inputs[0], shapes, starts, inputs[1], inputs[2])
            torch.autograd.grad(out, inputs, grad)

        return forward_only, forward_backward

    public, op = through(ms_deform_attn), through(torch.ops.turbo_physai.ms_deform_attn)
    public_amp = through(ms_deform_attn, low, autocast=True)
    op_amp = through(torch.ops.turbo_physai.ms_deform_attn, low, autocast=True)
    return {
        "forward: (a) public function": public[0],
        "forward: (b) custom op": op[0],
        "forward: (c) binding alone": binding_forward,
        "fwd+bwd: (a) public function": public[1],
        "fwd+bwd: (b) custom op": op[1],
        "fwd+bwd: (c) binding alone": binding_forward_backward,
        "fwd+bwd: (d) no-op autograd.Function": lambda: torch.autograd.grad(
            _Noop.apply(*leaves, out_shape), leaves, grad),
        "forward: (e) public function, autocast": public_amp[0],
        "forward: (f) custom op, autocast": op_amp[0],
        "fwd+bwd: (e) public function, autocast": public_amp[1],
        "fwd+bwd: (f) custom op, autocast": op_amp[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--calls", type=int, default=None,
                        help="calls per timing (default: 3000 on the CPU, 200 on CUDA)")
    parser.add_argument("--json", default=None,
                        help="default: results/host_overhead.json (_cuda.json for --device cuda)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    n_calls = args.calls or (200 if cuda else 3000)
    torch.set_num_threads(1)
    rows: dict[str, object] = {}
    if not cuda:
        rows["import turbo_physai (us)"] = import_us()
    for name, fn in calls(args.device).items():
        if cuda:
            host, event = cuda_ms(fn, n_calls)
            rows[f"{name} (host ms)"] = host
            rows[f"{name} (event ms)"] = event
        else:
            rows[f"{name} (us)"] = cpu_us(fn, n_calls)
    for name, value in rows.items():
        print(f"{name:<52}{value:>12.3f}")
    path = Path(args.json or RESULTS / f"host_overhead{'_cuda' if cuda else ''}.json")
    machine = torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine()
    path.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
        "torch": torch.__version__, "device": machine, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
