"""Per-call cost of the kernel registry, and fake_quant_fp8 C++ vs the PyTorch reference (CPU).

    PYTHONPATH=src python benchmarks/registry.py [--registry-only] [--out JSON]

Prints a table and writes benchmarks/results/registry.json (or JSON). Figures are the best of
several repeats (the least disturbed run), per call.
"""

from __future__ import annotations

import argparse
import json
import platform
import timeit
from pathlib import Path

import torch

from turbo_physai import kernels
from turbo_physai.kernels import reference
from turbo_physai.ops import fake_quant_fp8 as _op  # noqa: F401  (registers the op)

OP = torch.ops.turbo_physai.fake_quant_fp8.default


def per_call(fn, number, repeat=7):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def registry_overhead():
    x, s = torch.randn(4, 4), torch.tensor(1.0)

    def impl(x, scale):
        return x

    def decline(x, scale):
        return None

    def predicate(x, scale):
        return x.device.type == "cpu" and x.dtype == torch.float32 and scale.dtype == torch.float32

    def environment():  # LibreYOLO's `predicate=_eligible`: asked once, cached with the slot
        return True

    native = {"device": "cpu", "dtype": "float32"}
    for name, kw in {
        "bench_plain": {},
        "bench_native": {"requires": native},
        "bench_predicate": {"predicate": predicate},
        "bench_environment": {"predicate": environment},
    }.items():
        kernels.register(name, impl, name="reference")
        kernels.register(name, impl, name="fast", **kw)
    kernels.register("bench_decline", impl, name="reference")
    kernels.register("bench_decline", decline, name="declines")
    number = 200_000
    direct = per_call(lambda: impl(x, s), number)
    rows = []
    for label, slot in [
        ("registry, no requirements", "bench_plain"),
        ("registry, native requires (device+dtype, 2 tensors)", "bench_native"),
        ("registry, Python predicate (same checks)", "bench_predicate"),
        ("registry, environment predicate (zero-argument)", "bench_environment"),
        ("registry, newest returns None, the reference runs", "bench_decline"),
    ]:
        call = kernels.slot(slot)
        t = per_call(lambda call=call: call(x, s), number)
        rows.append({"case": label, "per_call_ns": t * 1e9, "added_ns": (t - direct) * 1e9})
    return {"direct_call_ns": direct * 1e9, "rows": rows}


def fake_quant():
    gen = torch.Generator().manual_seed(0)
    slot = kernels.slot("fake_quant_fp8")
    rows = []
    for shape in [(32, 32), (256, 256), (1024, 1024), (4096, 1024)]:
        x = torch.randn(shape, generator=gen) * 200
        for scale_kind, s in [
            ("tensor", torch.tensor(0.5)),
            ("channel", torch.rand(shape[0]) + 0.1),
        ]:
            number = max(3, 2_000_000 // x.numel())
            ref = per_call(lambda x=x, s=s: reference.fake_quant_fp8_forward(x, s), number)
            cpp = per_call(lambda x=x, s=s: OP(x, s), number)
            via_slot = per_call(lambda x=x, s=s: slot(x, s), number)
            rows.append(
                {
                    "shape": list(shape),
                    "scale": scale_kind,
                    "reference_us": ref * 1e6,
                    "cpp_op_us": cpp * 1e6,
                    "cpp_via_slot_us": via_slot * 1e6,
                    "speedup": ref / cpp,
                }
            )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry-only", action="store_true",
                        help="only the per-call registry figures (no fake_quant_fp8 table)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "registry.json"
    )
    args = parser.parse_args()
    results = {
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "registry": registry_overhead(),
    }
    if not args.registry_only:
        results["fake_quant_fp8"] = fake_quant()
    reg = results["registry"]
    print(f"direct call of the implementation: {reg['direct_call_ns']:.0f} ns")
    print(f"{'case':55s} {'per call':>10s} {'added':>10s}")
    for r in reg["rows"]:
        print(f"{r['case']:55s} {r['per_call_ns']:8.0f}ns {r['added_ns']:8.0f}ns")
    if "fake_quant_fp8" in results:
        print(
            f"\n{'fake_quant_fp8 shape':22s} {'scale':8s} {'reference':>12s} {'C++ op':>10s} "
            f"{'via slot':>10s} {'speedup':>8s}"
        )
    for r in results.get("fake_quant_fp8", []):
        print(
            f"{str(tuple(r['shape'])):22s} {r['scale']:8s} {r['reference_us']:10.1f}us "
            f"{r['cpp_op_us']:8.1f}us {r['cpp_via_slot_us']:8.1f}us {r['speedup']:7.2f}x"
        )
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
