"""benchmarks/e2e_rtdetr.py: RT-DETR (ResNet-50-vd) inference, stock against the transformers
catalog's groups, eager and compiled, in one process (issue 7).

    PYTHONPATH=src python benchmarks/e2e_rtdetr.py [--batch 8] [--image 640] [--reps 50]
        [--variants NAME,...] [--budget-s S] [--json PATH] [--profile DIR]
    # CPU smoke run: --device cpu --size tiny --batch 2 --image 64 --reps 3

Model: ``RTDetrForObjectDetection(RTDetrConfig())`` (``--size full``: ResNet-50-vd backbone,
d_model 256, 300 queries, 6 decoder layers; transformers builds the backbone from its config,
nothing is downloaded) or the zoo's small/tiny RT-DETR; random init, float32, eval mode,
``torch.no_grad``, random pixels. BatchNorm2d weights are set to 1: transformers' init draws
them with std 0.01, which shrinks each conv-BN block 100x and leaves encoder features at
1e-6..1e-11, where query selection and scores hinge on float32 rounding and no parity check
could fail. Timing is unaffected.

Variants (``VARIANTS``, measured in that order, so a run that reaches ``--budget-s`` still has
the issue's baselines and the likeliest winner): groups are applied through
``turbo_physai.apply`` with their options and rolled back after; ``torch._dynamo.reset()``
before each. A figure is the median (and min) of ``--reps`` calls after the first call (whose
wall time, for compiled variants, is the compile time) and ``--warmup`` more, each call
synchronized and timed with ``perf_counter``. Parity: see benchmarks/rtdetr_parity.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import rtdetr_parity as parity
import torch
from torch._inductor.utils import fresh_cache

import turbo_physai as tpa

START = time.perf_counter()
MSDA = "transformers.rt_detr.msda"
LAYERS = "transformers.rt_detr.compile"
MODEL = "transformers.rt_detr.compile_model"
STATIC = {"fullgraph": True, "dynamic": False}  # one shape here: no dynamic-shape recompile


@dataclass(frozen=True)
class Variant:
    what: str
    groups: tuple[str, ...] = ()
    options: Mapping[str, Mapping] = field(default_factory=dict)  # group ID -> options
    compile: Mapping | None = None  # torch.compile(model, **compile) on top, as a user would
    channels_last: bool = False  # model weights and input in channels_last (NHWC) memory format


VARIANTS = {
    "stock_eager": Variant("transformers as is"),
    "ours_eager": Variant("msda group (our op), eager", (MSDA,)),
    "ours_compile_model_cudagraphs": Variant(
        "compile_model group, mode reduce-overhead (CUDA graphs), fullgraph", (MODEL,),
        {MODEL: {"mode": "reduce-overhead", **STATIC}}),
    "stock_compile": Variant("torch.compile(model), default mode (the issue's baseline)",
                             compile={}),
    # What CUDA graphs give without our groups: the share of the win that is not ours.
    "stock_compile_cudagraphs": Variant("torch.compile(model, mode='reduce-overhead'), no groups",
                                        compile={"mode": "reduce-overhead"}),
    "ours_compile": Variant("msda group + torch.compile(model), default mode", (MSDA,),
                            compile={}),
    # The group's opt-in precision trade: TF32 matrix products (convolutions use TF32 already)
    "ours_compile_model_cudagraphs_tf32": Variant(
        "compile_model group, reduce-overhead, fullgraph, matmul_precision high (TF32)", (MODEL,),
        {MODEL: {"mode": "reduce-overhead", **STATIC, "matmul_precision": "high"}}),
    # Does NHWC help the convolutions that dominate once the host overhead is gone?
    "ours_compile_model_cudagraphs_channels_last": Variant(
        "compile_model group, reduce-overhead, fullgraph, model and input channels_last", (MODEL,),
        {MODEL: {"mode": "reduce-overhead", **STATIC}}, channels_last=True),
    "ours_compile_layers": Variant("compile group (decoder layers), catalog default options",
                                   (LAYERS,)),
    "ours_compile_model_max_autotune": Variant(
        "compile_model group, mode max-autotune (autotuned kernels + CUDA graphs)", (MODEL,),
        {MODEL: {"mode": "max-autotune", **STATIC}}),
}


def build(size: str, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if size == "full":
        from transformers import RTDetrConfig, RTDetrForObjectDetection

        model = RTDetrForObjectDetection(RTDetrConfig())
    else:
        from turbo_physai import zoo

        model = zoo.build("rt_detr", size).model
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(module.weight)
    return model.to(device).eval()


def describe(model: torch.nn.Module) -> dict:
    c = model.config
    b = c.backbone_config
    return {"backbone": f"{b.model_type} {b.layer_type} depths {list(b.depths)}",
            "d_model": c.d_model, "num_queries": c.num_queries, "num_labels": c.num_labels,
            "decoder_layers": c.decoder_layers, "encoder_layers": c.encoder_layers,
            "parameters_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2)}


def machine(cuda: bool) -> dict:
    import transformers

    # torch's defaults, recorded because they decide the precision: cuDNN convolutions may use
    # TF32, float32 matrix products do not.
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark}


def print_table(result: dict, args) -> None:
    print(f"\n{args.device} {result['machine']['gpu'] or ''}, RT-DETR {args.size} "
          f"{result['model']['backbone']}, input {result['input']}, float32, no_grad; "
          f"ms = median (min) of {args.reps}; compile s = first call; parity against stock "
          f"eager, tolerance {parity.TOL}\n")
    print("| variant | ms | compile s | graphs/breaks/cudagraph skips | queries same location "
          "| detections matched | max abs diff logits / boxes (same-location queries) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in result["variants"].items():
        print(row_text(name, r))


def run_calls(call, args, sync) -> tuple[float, list[float], dict]:
    """Wall time of the first call (for a compiled variant, the compile), milliseconds of the
    timed calls after the warm-up ones, and the outputs of one more call: a CUDA-graph replay
    where the variant records one."""
    sync()
    start = time.perf_counter()
    call()
    sync()
    first_s = time.perf_counter() - start
    times = []
    for i in range(args.warmup + args.reps):
        sync()
        start = time.perf_counter()
        call()
        sync()
        if i >= args.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return first_s, times, parity.snapshot(call())


def profile_table(call, sync, calls: int = 3, rows: int = 30) -> str:
    """Kernels by GPU time over `calls` calls (after the timed ones: compiled and warm)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        sync()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows,
                                     max_name_column_width=70)


def measure(variant: Variant, model, pixels, reference, args, sync,
            profile_to: Path | None = None) -> dict:
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    if pixels.is_cuda:
        torch.cuda.reset_peak_memory_stats()
    if variant.groups:
        config = tpa.OptimizationConfig.for_groups(*variant.groups, **variant.options)
        tpa.apply(config, strict=True)
    # An empty inductor/Triton cache per variant: the compile time is what a fresh machine
    # pays, not what is left after earlier variants compiled the same kernels.
    if variant.channels_last:
        model.to(memory_format=torch.channels_last)
        pixels = pixels.contiguous(memory_format=torch.channels_last)
    try:
        with fresh_cache(), torch.no_grad():
            fn = model if variant.compile is None else torch.compile(model, **variant.compile)
            first_s, times, got = run_calls(lambda: fn(pixel_values=pixels), args, sync)
            if profile_to is not None:
                profile_to.write_text(profile_table(lambda: fn(pixel_values=pixels), sync))
    finally:
        tpa.rollback()
        if variant.channels_last:
            model.to(memory_format=torch.contiguous_format)
    inductor = counters["inductor"]
    return {"status": "ok", "first_call_s": round(first_s, 2),
            "median_ms": statistics.median(times), "min_ms": min(times),
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "cudagraph_skips": inductor["cudagraph_skips"],
            # > 0 once a CUDA graph was recorded (the inputs it copies in on each replay)
            "cudagraph_inputs": inductor["cudagraph_recorded_non_static_inputs"],
            "peak_mem_mib": torch.cuda.max_memory_allocated() / 2**20 if pixels.is_cuda else None,
            "parity_vs_stock_eager": parity.compare(reference, got)}


def row_text(name: str, r: dict) -> str:
    if r["status"] != "ok":
        return f"| {name} | {r['status']} | | | | | |"
    p = r["parity_vs_stock_eager"]
    compiled = r["graphs"] > 0
    diffs = [p[f"{k}_max_abs_diff_same_location"] for k in ("logits", "pred_boxes")]
    return (f"| {name} | {r['median_ms']:.2f} ({r['min_ms']:.2f}) "
            f"| {r['first_call_s'] if compiled else '-'} "
            f"| {r['graphs']}/{r['graph_breaks']}/{r['cudagraph_skips']} "
            f"| {p['queries_same_location']}/{p['queries']} "
            f"| {p['detections_matched']}/{p['detections']} "
            f"({p['detections_matched_worst_image']} worst image) "
            f"| {' / '.join('-' if d is None else f'{d:.1e}' for d in diffs)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="full", choices=["full", "small", "tiny"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image", type=int, default=640,
                        help="side of the square input; >= 256 for --size full (the float64 "
                             "check at half the side needs as many locations as queries)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    # A started variant is never interrupted: a compile stopped halfway (a signal) can be
    # swallowed by a fallback inside torch and leave a half-compiled variant that looks fine.
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no variant after this many seconds (0: no limit)")
    parser.add_argument("--min-variant-s", type=float, default=60,
                        help="with --budget-s: start no variant with less time than this left")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=Path, default=None,
                        help="write each variant's profiler table (3 calls) into this folder")
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    out = args.json or Path(f"benchmarks/results/e2e_rtdetr_{args.device}.json")
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    model = build(args.size, args.device)
    gen = torch.Generator().manual_seed(1)
    pixels = torch.randn(args.batch, 3, args.image, args.image, generator=gen).to(args.device)
    # float64 parity input: batch 2, half the side (a multiple of 32, RT-DETR's largest stride)
    side = max(args.image // 64 * 32, 32)
    small = pixels[:2, :, :side, :side].contiguous()
    reference, msda_args = parity.stock_reference(model, pixels)
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": machine(cuda),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "model": describe(model), "input": list(pixels.shape), "reps": args.reps,
        "warmup": args.warmup,
        "parity": {"op": parity.op_errors(model, msda_args, MSDA),
                   "float64_model": parity.float64_model(model, small, MSDA),
                   "tolerance": parity.TOL},
        "variants": {},
    }
    print(json.dumps(result["parity"], indent=1), file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in [n for n in VARIANTS if n in args.variants.split(",")]:
        variant = VARIANTS[name]
        left = args.budget_s - (time.perf_counter() - START) if args.budget_s else None
        row = {"what": variant.what, "groups": list(variant.groups),
               "options": dict(variant.options), "torch_compile": variant.compile}
        if left is not None and left < args.min_variant_s:
            row["status"] = f"skipped: {left:.0f} s of the budget left"
        else:
            begin = time.perf_counter()
            try:
                profile_to = None
                if args.profile:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    profile_to = args.profile / f"e2e_rtdetr_{name}.txt"
                row.update(measure(variant, model, pixels, reference, args, sync, profile_to))
            except Exception as err:  # noqa: BLE001 - one variant's failure ends only it
                row["status"] = f"{type(err).__name__}: {err}"[:300]
                torch._dynamo.reset()
            row["wall_s"] = round(time.perf_counter() - begin, 1)
        result["variants"][name] = row
        # The row as it will be in the table: a run killed later still has it in its log.
        print(f"{row_text(name, row)} {time.perf_counter() - START:.0f} s elapsed",
              file=sys.stderr)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(out)  # after each variant: a run cut short keeps what it measured

    print_table(result, args)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
