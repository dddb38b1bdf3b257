"""What benchmarks/e2e_ultralytics.py and e2e_rfdetr.py share: one host model
(``turbo_physai.hosts_zoo``), stock against its shipped config, eager and compiled, inference
and a training step, in one process; a printed table and a JSON file.

Method. Eager: blocks of ``--reps`` timed runs (after ``--warmup`` untimed ones) alternate
stock / ours ``ROUNDS`` times, applying and rolling back the config between blocks, so a change
of load hits both sides. Compiled: ``torch.compile`` (backend ``--compile-backend``, default
inductor, other options default) of the model method the runs reach (``HostModel.compile``),
stock first, then ours (applied before compiling, ``torch._dynamo.reset()`` before each); one
block each after the warm-up runs, the first of which compiles (its wall time is reported as
the compile time). A figure is the median (and min) of a side's timed runs, each synchronized
on CUDA. "inference": eval mode,
``torch.no_grad``, the raw decoder outputs. "training step": train mode, the library's own
loss on fixed random targets, backward; no optimizer step, so the weights stay those of the
comparison. Parity in the same run: max abs difference of the eval outputs and of the loss, at
the float32 matmul precision the host library left (recorded) and, where that is not
"highest", in strict float32 too (``strict_float32``). On CUDA, each side's pass is profiled
once more after its timed runs: the GPU busy time of one call (``gpu_profile``), its kernel
count and the GPU's idle time waiting for the host (``gpu``), and the median over it
(``per_busy``): how far the host holds that pass above its GPU work.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from gpu_profile import gpu_kernels

import turbo_physai as tpa

ROUNDS = 3
PASSES = ("inference", "training step")


def _timed(fn: Callable[[], object], reps: int, warmup: int, cuda: bool) -> tuple[list, float]:
    """Wall-clock ms of ``reps`` calls after ``warmup`` untimed ones; and the first call's."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times, first = [], None
    for i in range(warmup + reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        ms = (time.perf_counter() - start) * 1e3
        first = ms if first is None else first
        if i >= warmup:
            times.append(ms)
    return times, first


def _passes(host, amp: bool) -> dict[str, Callable[[], object]]:
    def autocast():
        if not amp:
            return contextlib.nullcontext()
        return torch.autocast(host.images.device.type, dtype=torch.bfloat16)

    def infer():
        with autocast():
            return host.infer()

    def train():
        with autocast():
            return host.train_step()

    return {"inference": infer, "training step": train}


def _summary(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times)}


def ours_config(config_id: str, groups: tuple[str, ...] = ()):
    """The shipped config ``config_id``, with ``groups`` added (IDs of its catalogs' groups)."""
    if not groups:
        return config_id
    base = tpa.load_config(config_id)
    return dataclasses.replace(
        base, groups=(*base.groups, *(tpa.GroupSelection(g) for g in groups)))


def _parity(host, passes, ours) -> dict:
    """Max abs differences, stock vs ours, of the eval outputs and of a training step's loss."""
    # A training step moves BatchNorm's running statistics, which the next eval pass reads.
    state = copy.deepcopy(host.model.state_dict())
    stock_out, stock_loss = passes["inference"](), passes["training step"]()
    host.model.load_state_dict(state)
    with tpa.applied(ours, strict=True):
        ours_out, ours_loss = passes["inference"](), passes["training step"]()
    host.model.load_state_dict(state)
    return {
        "max_abs_diff": max(
            float((a.float() - b.float()).abs().max())
            for a, b in zip(stock_out, ours_out, strict=True)
        ),
        "loss_abs_diff": float((stock_loss - ours_loss).abs()),
    }


def measure(host, *, reps: int, warmup: int, compile_options: dict | None, amp: bool,
            on_row: Callable[[dict], None] = lambda row: None, groups: tuple[str, ...] = ()
            ) -> dict:
    """The row of figures; ``on_row`` gets it once the eager figures are in (compiling may take
    longer than the caller's time limit) and again at the end. ``groups``: added to "ours"."""
    cuda = host.images.is_cuda
    ours = ours_config(host.config_id, groups)
    passes = _passes(host, amp)
    # The host library may have switched float32 matrix products to TF32 when imported
    # (`import rfdetr` sets "high"): the runs are timed as its users get them, and parity is
    # checked in strict float32 too, where TF32's rounding does not hide the op's difference.
    precision = torch.get_float32_matmul_precision()
    row = {"model": host.name, "config": " + ".join((host.config_id, *groups)),
           "float32_matmul_precision": precision}
    row.update(_parity(host, passes, ours))
    if precision != "highest":
        torch.set_float32_matmul_precision("highest")
        try:
            row["strict_float32"] = _parity(host, passes, ours)
        finally:
            torch.set_float32_matmul_precision(precision)
    eager = {side: {p: [] for p in PASSES} for side in ("stock", "ours")}
    for _ in range(ROUNDS):
        for side in ("stock", "ours"):
            with (
                tpa.applied(ours, strict=True)
                if side == "ours"
                else (contextlib.nullcontext())
            ):
                for label, fn in passes.items():
                    eager[side][label] += _timed(fn, reps, warmup, cuda)[0]
    gpu = _gpu_work(passes, ours) if cuda else {}
    for label in PASSES:
        stock, mine = _summary(eager["stock"][label]), _summary(eager["ours"][label])
        for side, figures in (("stock", stock), ("ours", mine)):
            if (side, label) in gpu:
                figures["gpu"] = gpu[side, label]
                figures["per_busy"] = figures["median_ms"] / gpu[side, label]["busy_ms"]
        row[label] = {
            "stock": stock,
            "ours": mine,
            "speedup": stock["median_ms"] / mine["median_ms"],
        }
    on_row(row)
    if compile_options is not None:
        row["compile_options"] = compile_options
        for label in PASSES:
            row[label]["compiled"] = {}
        for side in ("stock", "ours"):
            torch._dynamo.reset()
            with (
                tpa.applied(ours, strict=True)
                if side == "ours"
                else (contextlib.nullcontext())
            ):
                host.compile(**compile_options)
                try:
                    for label, fn in passes.items():
                        times, first = _timed(fn, reps, warmup + 1, cuda)
                        row[label]["compiled"][side] = {**_summary(times), "first_call_ms": first}
                finally:
                    host.uncompile()
        torch._dynamo.reset()
        for label in PASSES:
            c = row[label]["compiled"]
            c["speedup"] = c["stock"]["median_ms"] / c["ours"]["median_ms"]
        on_row(row)
    return row


def _gpu_work(passes, ours) -> dict:
    """{(side, pass): the GPU busy time of one call, its kernels, the GPU's idle time}."""
    found = {}
    for side in ("stock", "ours"):
        with tpa.applied(ours, strict=True) if side == "ours" else contextlib.nullcontext():
            for label, fn in passes.items():
                k = gpu_kernels(fn)
                found[side, label] = {"busy_ms": k["busy_ms"], "kernels": k["kernels"],
                                      "idle_long_ms": k["idle"]["idle_long_ms"],
                                      "top": k["top"][:5]}
    return found


def _cell(figures: dict) -> str:
    """``median (min)`` ms, with ``[GPU busy]`` where profiled."""
    busy = f" [{figures['gpu']['busy_ms']:.1f}]" if "gpu" in figures else ""
    return f"{figures['median_ms']:.1f} ({figures['min_ms']:.1f}){busy}"


def print_table(row: dict, header: str) -> None:
    print(
        f"\n{header}\nms = median (min) [GPU busy]; float32 matmul precision "
        f"{row['float32_matmul_precision']!r}; max abs diff of the eval outputs "
        f"{row['max_abs_diff']:.1e}, of the loss {row['loss_abs_diff']:.1e}"
    )
    if "strict_float32" in row:
        strict = row["strict_float32"]
        print(f"in strict float32 (precision 'highest'): {strict['max_abs_diff']:.1e}, "
              f"of the loss {strict['loss_abs_diff']:.1e}")
    print()
    print("| model | pass | mode | stock ms | ours ms | speed-up |")
    print("|---|---|---|---|---|---|")
    for label in PASSES:
        t = row[label]
        modes = [("eager", t["stock"], t["ours"], t["speedup"])]
        if "compiled" in t:
            c = t["compiled"]
            modes.append(("torch.compile", c["stock"], c["ours"], c["speedup"]))
        for mode, stock, ours, speedup in modes:
            print(f"| {row['model']} | {label} | {mode} | {_cell(stock)} | {_cell(ours)} "
                  f"| {speedup:.2f}x |")


def parser(doc: str, model_help: str, default_model: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--model", default=default_model, help=model_help)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image", type=int, default=640, help="image side (px)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    p.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend (--quick: aot_eager)"
    )
    p.add_argument("--amp", action="store_true", help="both sides under bfloat16 autocast")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CPU smoke run: batch 2, 64 px, 1 rep, compiled with aot_eager (dynamo "
        "and AOTAutograd trace forward and backward; inductor's CPU code generation "
        "of these models takes many minutes on 2 cores)",
    )
    p.add_argument("--groups", default="",
                   help="comma-separated group IDs added to the shipped config on our side "
                        "(e.g. the host's cuda_graph group)")
    p.add_argument("--json", help="default: benchmarks/results/e2e_<host>.json")
    return p


def run(args: argparse.Namespace, host_name: str, build: Callable[..., object]) -> int:
    if args.quick:
        args.device, args.batch, args.reps, args.warmup = "cpu", 2, 1, 0
        args.compile_backend = "aot_eager"
    torch.manual_seed(0)
    host = build(args)
    header = (
        f"{host.name} on {args.device}"
        f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}, "
        f"batch {args.batch}, {tuple(host.images.shape[-2:])} px, "
        f"{'bfloat16 autocast' if args.amp else 'float32'}; {ROUNDS}x{args.reps} eager runs"
        f"{'' if args.no_compile else f', {args.reps} compiled ({args.compile_backend})'}"
    )
    print(header, file=sys.stderr)
    compile_options = None if args.no_compile else {"backend": args.compile_backend}
    out = Path(args.json or f"benchmarks/results/e2e_{host_name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(row: dict) -> None:
        print_table(row, header)
        out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"),
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            },
            "host_library": {host_name: importlib.metadata.version(host_name)},
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "batch": args.batch,
            "image": list(host.images.shape[-2:]),
            "amp": args.amp,
            "reps": args.reps,
            "warmup": args.warmup,
            "rounds": ROUNDS,
            "result": row,
        }, indent=2) + "\n")
        print(f"\nwrote {out}", flush=True)

    measure(host, reps=args.reps, warmup=args.warmup, compile_options=compile_options,
            amp=args.amp, on_row=save, groups=tuple(g for g in args.groups.split(",") if g))
    return 0
