"""benchmarks/e2e_deformable_detr.py: Deformable DETR (ResNet-50, 800x1333), stock vs ours.

    PYTHONPATH=src python benchmarks/e2e_deformable_detr.py [--device cuda|cpu] [--json PATH]
        [--compile-layers MODE] [--compile-model MODE] [--compile-backend NAME]
        [--deterministic] [--amp DTYPE]

Deformable DETR with a ResNet-50 backbone (transformers' own ResNet, random init: nothing is
downloaded), batch 2, 800x1333, float32. "Ours" swaps transformers'
``MultiScaleDeformableAttention.forward`` for ``turbo_physai.ops.frontends.transformers_forward``
through the engine (``turbo_physai.apply(groups=[...])``), so the kernel registry picks the
implementation (CUDA kernel on a GPU, C++ kernel on the CPU). Figures: median and minimum wall
time of inference (``no_grad``, eval mode) and of a training step (train mode: forward, then
backward of ``logits.sum() + pred_boxes.sum()``; no optimizer step), synchronized per
iteration; the peak memory of a training step above the model and inputs (CUDA); the largest
difference of logits and boxes between the two in eval mode; and a
profiler table of one training step with ours (where the remaining time goes). Default device:
cuda if there is a GPU, else cpu (with smaller --batch/--height/--width for a catalog check).
``--deterministic`` also measures both under ``torch.use_deterministic_algorithms(True,
warn_only=True)`` (cuBLAS workspace config set as torch asks), lists the ops that warned (no
deterministic implementation) and adds the profiler table of ours in that mode. ``--amp
float16|bfloat16`` runs every call under ``torch.autocast`` of that dtype (mixed precision; the
loss is summed in float32). ``--compile-backend cudagraphs`` runs the compile variants on torch's
``cudagraphs`` backend instead of inductor: the ATen graph replayed by CUDA graph trees, no code
generation (MODE is then ignored), so the numerics stay those of the eager ops.

``--training-step`` measures the whole training step of issue 29 instead: forward with labels
(transformers' DETR loss with Hungarian matching; 5 fixed random boxes per image), backward and a
fused AdamW step (CUDA; plain on the CPU), for stock eager, stock ``torch.compile(model)``
(inductor, default mode), eager with our op, with our op and ``transformers.deformable_detr.
graph_safe`` (no host sync per encoder layer) and, on CUDA, that plus ``compile_model`` on the
``cudagraphs`` backend (fullgraph), and ``transformers.deformable_detr.cuda_graph`` (the model
forward and backward replayed as CUDA graphs), each from the same weights (``--variants`` picks
some); figures: step time (median, min), the host's time to issue a step, GPU busy time of one step
(the profiler's summed device time), their ratio, the peak memory of a step, the first step's time
(compile or capture) and the first step's loss against stock's; and inference (eval, no_grad: time
and GPU busy time) for the variants that need no second compile; per variant also the kernels of
one step (count, and the ten that take longest) and where the GPU idles within the step
(``gpu_profile.idle_gaps``). ``--model rt_detr`` runs the same variants on RT-DETR
(``RTDetrForObjectDetection(RTDetrConfig())``, ResNet-50-vd, built as benchmarks/e2e_rtdetr.py
does; its training forward builds denoising queries from the labels; use ``--batch 8 --height 640
--width 640``) with its groups (``transformers.rt_detr.*``). ``--varying-labels N`` gives each step
other box counts (N sets of 1-10 boxes per image, in turn), as real data does: a captured loss then
meets a new signature each step (see the variant's ``cuda_graph`` stats). Writes
benchmarks/results/e2e_<model>_training_step[_AMP].json, after each variant.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import itertools
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import transformers
from gpu_profile import gpu_kernels

import turbo_physai

TARGET = ("transformers.models.deformable_detr.modeling_deformable_detr."
          "MultiScaleDeformableAttention.forward")
GROUP = turbo_physai.group("e2e.msda", turbo_physai.replace(
    TARGET, "turbo_physai.ops.frontends.transformers_forward"))


DEFAULT_JSON = Path("benchmarks/results/e2e_deformable_detr.json")


def build_model(device, name="deformable_detr"):
    if name == "rt_detr":
        import e2e_rtdetr

        return e2e_rtdetr.build("full", device)
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig

    backbone = ResNetConfig(out_features=["stage2", "stage3", "stage4"])
    config = DeformableDetrConfig(use_timm_backbone=False, use_pretrained_backbone=False,
                                  backbone_config=backbone, backbone=None)
    torch.manual_seed(0)
    return DeformableDetrForObjectDetection(config).to(device)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def times_ms(fn, device, reps, warmup=3):
    """Median and minimum of `reps` synchronized calls (the minimum is less sensitive to a busy
    host, which this host-bound model feels)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def host_ms(fn, device, reps):
    """Median time the host takes to issue one call (from a synchronized start until ``fn``
    returns, before the GPU is done): near the step time, the step is host-bound."""
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    sync(device)
    return statistics.median(times)


def autocast(device, amp):
    return torch.autocast(device.type, dtype=amp) if amp else contextlib.nullcontext()


def first_call_s(fn, device):
    """(fn()'s result, its synchronized wall time in seconds, to 0.1 s): a first call, which
    compiles or captures where a compiled variant runs."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return result, round(time.perf_counter() - start, 1)


def calls(model, pixels, amp=None):
    """(inference, training step) of the model on `pixels`, under autocast to `amp` if given."""
    def infer():
        with torch.no_grad(), autocast(pixels.device, amp):
            return model.eval()(pixel_values=pixels)

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        with autocast(pixels.device, amp):
            out = model(pixel_values=pixels)
            loss = out.logits.float().sum() + out.pred_boxes.float().sum()
        loss.backward()

    return infer, train_step


def peak_mib(fn, device):
    """Peak memory of one call above what was allocated before it (CUDA only)."""
    if device != "cuda":
        return None
    sync(device)
    model_and_inputs = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync(device)
    return (torch.cuda.max_memory_allocated() - model_and_inputs) / 2**20


def measure(model, pixels, device, reps, amp=None):
    infer, train_step = calls(model, pixels, amp)
    eval_out = infer()
    figures = {}
    for name, fn in (("inference", infer), ("train_step", train_step)):
        figures[f"{name}_ms"], figures[f"{name}_min_ms"] = times_ms(fn, device, reps)
    figures["train_step_peak_mib"] = peak_mib(train_step, device)
    return figures, eval_out, train_step


@contextlib.contextmanager
def deterministic_mode():
    """torch's deterministic mode, warn-only, for the block."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def measure_deterministic(model, pixels, device, reps):
    """`measure` in deterministic mode, with the ops that warned."""
    with deterministic_mode(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figures, out, step = measure(model, pixels, device, reps)
    figures["nondeterministic_ops"] = sorted(
        {str(w.message).split(" does not have")[0] for w in caught
         if "deterministic implementation" in str(w.message)})
    return figures, out, step


def deterministic_profile_table(step, device):
    with deterministic_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return profile_table(step, device)


def measure_compiled(model, pixels, device, reps, compile_group, options):
    """The catalog's msda group plus one of its compile groups: first-call (compile) seconds of
    inference and of a training step, then the same figures as `measure`."""
    msda = "transformers.deformable_detr.msda"
    config = turbo_physai.OptimizationConfig.for_groups(
        msda, compile_group, **{compile_group: options})
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    turbo_physai.apply(config, strict=True)
    try:
        first_s = {name: first_call_s(fn, device)[1]
                   for name, fn in zip(("inference", "train_step"), calls(model, pixels),
                                       strict=True)}
        figures, out, _ = measure(model, pixels, device, reps)
    finally:
        turbo_physai.rollback()
    figures.update(first_call_s=first_s, group=compile_group, options=options,
                   graphs=counters["stats"]["unique_graphs"],
                   graph_breaks=sum(counters["graph_break"].values()),
                   cudagraph_skips=counters["inductor"]["cudagraph_skips"])
    return figures, out


def max_diff(a, b):
    return max((a.logits.float() - b.logits.float()).abs().max().item(),
               (a.pred_boxes.float() - b.pred_boxes.float()).abs().max().item())


def profile_table(step, device, rows=25):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    step()
    with torch.profiler.profile(activities=activities) as prof:
        step()
        sync(device)
    key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def detr_labels(batch, num_labels, device, objects=5, seed=2):
    """Random targets: `objects` boxes (cx, cy, w, h inside the image) per image, or per image
    a count drawn from 1..10 where `objects` is None."""
    gen = torch.Generator().manual_seed(seed)
    counts = [objects or int(torch.randint(1, 11, (), generator=gen)) for _ in range(batch)]
    return [{"class_labels": torch.randint(0, num_labels, (n,), generator=gen).to(device),
             "boxes": (torch.rand(n, 4, generator=gen) * 0.4 + 0.3).to(device)}
            for n in counts]


def label_sets(batch, num_labels, device, varying=0):
    """The labels of successive steps: one fixed set (5 boxes per image), or ``varying`` sets
    with 1..10 boxes per image, cycled (real data: each step's counts differ)."""
    if not varying:
        return [detr_labels(batch, num_labels, device)]
    return [detr_labels(batch, num_labels, device, None, seed) for seed in range(varying)]


def training_step_variants(model, pixels, device, reps, amp, wanted=None, on_variant=None,
                           varying=0):
    """Issue 29's variants of the full training step, each from the same weights (``wanted``:
    the names to run in that order, default all; ``varying``: :func:`label_sets`);
    ``on_variant(results)`` after each."""
    sets = label_sets(pixels.shape[0], model.config.num_labels, device, varying)
    weights = copy.deepcopy(model.state_dict())
    def applied(*groups, **options):
        config = turbo_physai.OptimizationConfig.for_groups(*groups, **options)
        return lambda: turbo_physai.applied(config, strict=True)

    name = model.config.model_type.replace("-", "_")  # deformable_detr, rt_detr
    group = f"transformers.{name}"
    msda, safe, whole = f"{group}.msda", f"{group}.graph_safe", f"{group}.compile_model"
    variants = {"stock": (model, contextlib.nullcontext),
                "stock_compiled_model": (torch.compile(model), contextlib.nullcontext),
                "ours": (model, applied(msda)),
                "ours_graph_safe": (model, applied(msda, safe))}
    if device == "cuda":  # the model forward as CUDA graphs of the eager kernels
        variants["ours_graph_safe_cudagraphs"] = (model, applied(msda, safe, whole, **{
            whole: {"backend": "cudagraphs", "fullgraph": True, "dynamic": False}}))
        variants["ours_cuda_graph"] = (model, applied(f"{group}.cuda_graph"))  # + its deps
    results = {}
    unknown = sorted(set(wanted or ()) - set(variants))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; on {device}: {sorted(variants)}")
    for name in wanted or variants:  # in the order asked: a time limit cuts the last
        callee, context = variants[name]
        model.load_state_dict(weights)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")

        calls = itertools.count()

        # Modes switch only between the step's and inference's measurements, as a training
        # loop switches per epoch: train() walks all 534 modules (1.3 ms a call on the dev box).
        def step(callee=callee, optimizer=optimizer, calls=calls):
            if not model.training:
                model.train()
            optimizer.zero_grad(set_to_none=True)
            with autocast(pixels.device, amp):
                labels = sets[next(calls) % len(sets)]
                loss = callee(pixel_values=pixels, labels=labels).loss
            loss.backward()
            optimizer.step()
            return loss.detach()

        def infer(callee=callee):
            if model.training:
                model.eval()
            with torch.no_grad(), autocast(pixels.device, amp):
                return callee(pixel_values=pixels)

        with context():
            torch.manual_seed(3)  # the same dropout masks (inductor draws its own: not equal)
            first_loss, first_s = first_call_s(step, device)
            first_loss = first_loss.item()
            median, minimum = times_ms(step, device, reps, warmup=2)
            host = host_ms(step, device, reps)
            kernels = gpu_kernels(step, device)
            busy = kernels.pop("busy_ms")
            figures = {"step_ms": median, "step_min_ms": minimum, "host_ms": host,
                       "gpu_busy_ms": busy,
                       "step_per_busy": median / busy if busy else None,
                       "peak_mib": peak_mib(step, device), "first_step_s": first_s,
                       "first_loss": first_loss, "step_kernels": kernels}
            if "compiled" not in name:  # eval mode would compile the model again
                figures["infer_ms"], figures["infer_min_ms"] = times_ms(infer, device, reps)
                kernels = gpu_kernels(infer, device)
                figures["infer_gpu_busy_ms"] = kernels.pop("busy_ms")
                figures["infer_kernels"] = kernels
            if name == "ours_cuda_graph":
                from turbo_physai.optimizations.common import cuda_graph

                figures["cuda_graph"] = cuda_graph.stats(model)
        results[name] = figures
        if on_variant:
            on_variant(results)
    model.load_state_dict(weights)
    stock = results.get("stock")
    for figures in results.values():
        if stock:
            figures["first_loss_diff_vs_stock"] = abs(figures["first_loss"] - stock["first_loss"])
            figures["speedup_vs_stock"] = stock["step_ms"] / figures["step_ms"]
            if "infer_ms" in figures:
                figures["infer_speedup_vs_stock"] = stock["infer_ms"] / figures["infer_ms"]
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--width", type=int, default=1333)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--profile", type=Path, default=None, help="write the profiler table here")
    parser.add_argument("--compile-layers", metavar="MODE", default=None,
                        help="also measure the catalog's transformers.deformable_detr.compile "
                             "group (torch.compile mode MODE, e.g. default) on top of our op")
    parser.add_argument("--compile-model", metavar="MODE", default=None,
                        help="also measure the catalog's transformers.deformable_detr."
                             "compile_model group (the whole DeformableDetrModel, mode MODE, "
                             "e.g. reduce-overhead) on top of our op")
    parser.add_argument("--compile-backend", metavar="NAME", default="inductor",
                        help="torch.compile backend of the compile variants (default inductor; "
                             "cudagraphs: CUDA graphs of the ATen graph, MODE ignored)")
    parser.add_argument("--deterministic", action="store_true",
                        help="also measure stock and ours in deterministic mode (warn-only)")
    parser.add_argument("--amp", choices=["float16", "bfloat16"], default=None,
                        help="run stock and ours under torch.autocast to this dtype")
    parser.add_argument("--training-step", action="store_true",
                        help="measure issue 29's full training step (loss with matching, "
                             "backward, AdamW) instead")
    parser.add_argument("--model", choices=["deformable_detr", "rt_detr"],
                        default="deformable_detr", help="with --training-step: the model")
    parser.add_argument("--varying-labels", type=int, default=0, metavar="N",
                        help="with --training-step: N label sets with 1-10 boxes per image, "
                             "one per step in turn (real data), instead of one fixed set")
    parser.add_argument("--variants", default=None,
                        help="with --training-step: comma-separated variant names to run "
                             "(default all)")
    args = parser.parse_args(argv)
    amp = getattr(torch, args.amp) if args.amp else None
    if args.deterministic:  # before cuBLAS starts: its deterministic mode needs this workspace
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    model = build_model(args.device, args.model if args.training_step else "deformable_detr")
    gen = torch.Generator().manual_seed(1)
    pixels = torch.randn(args.batch, 3, args.height, args.width, generator=gen).to(args.device)
    if args.training_step:
        return write_training_step(args, model, pixels, amp)

    stock, stock_out, _ = measure(model, pixels, args.device, args.reps, amp)
    deterministic = {}
    if args.deterministic:
        deterministic["stock_deterministic"], _, _ = measure_deterministic(
            model, pixels, args.device, args.reps)
    report = turbo_physai.apply(groups=[GROUP], strict=True)
    try:
        ours, ours_out, step = measure(model, pixels, args.device, args.reps, amp)
        table = profile_table(step, args.device)
        if args.deterministic:
            figures, out, _ = measure_deterministic(model, pixels, args.device, args.reps)
            figures["max_abs_diff_logits_boxes"] = max_diff(out, stock_out)
            deterministic["ours_deterministic"] = figures
            table += "\nIn deterministic mode:\n" + deterministic_profile_table(step, args.device)
    finally:
        turbo_physai.rollback()
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "command": " ".join(sys.argv), "amp": args.amp,
              "shape": [args.batch, 3, args.height, args.width], "stock": stock, "ours": ours,
              "max_abs_diff_logits_boxes": max_diff(ours_out, stock_out),
              "groups": [(g.id, g.status) for g in report.groups], **deterministic}
    compiled_variants = (
        ("ours_compiled_layers", args.compile_layers, "transformers.deformable_detr.compile"),
        # fullgraph off: in train mode each encoder layer branches on torch.isfinite(...).all()
        ("ours_compiled_model", args.compile_model, "transformers.deformable_detr.compile_model"))
    for key, mode, compile_group in compiled_variants:
        if not mode:
            continue
        options = {"backend": args.compile_backend, "dynamic": False}
        if args.compile_backend == "inductor":
            options["mode"] = mode
        try:
            compiled, compiled_out = measure_compiled(model, pixels, args.device, args.reps,
                                                      compile_group, options)
        except Exception as error:  # recorded: the other figures of the run stay usable
            result[key] = {"group": compile_group, "options": options, "error": repr(error)}
            continue
        result[key] = {**compiled, "max_abs_diff_logits_boxes": max_diff(compiled_out, stock_out)}
    print(json.dumps(result, indent=1))
    print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    if args.profile:
        args.profile.write_text(table)


def _cell(figures, key, fmt):
    return "-" if figures.get(key) is None else format(figures[key], fmt)


def write_training_step(args, model, pixels, amp):
    suffix = f"_{args.amp}" if args.amp else ""
    path = (args.json if args.json != DEFAULT_JSON
            else Path(f"benchmarks/results/e2e_{args.model}_training_step{suffix}.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "command": " ".join(sys.argv), "amp": args.amp, "model": args.model,
              "varying_labels": args.varying_labels,
              "shape": [args.batch, 3, args.height, args.width], "reps": args.reps}

    def save(variants):  # after each variant: a time limit may cut the run
        result["variants"] = variants
        path.write_text(json.dumps(result, indent=1))

    wanted = args.variants.split(",") if args.variants else None
    training_step_variants(model, pixels, args.device, args.reps, amp, wanted, save,
                           args.varying_labels)
    save(result["variants"])
    print("| variant | step ms (min) | host ms | GPU busy ms | step / busy | peak MiB "
          "| first step s | x stock | first loss diff | inference ms (min) | its GPU busy ms "
          "| x stock |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, f in result["variants"].items():
        cell = functools.partial(_cell, f)
        infer = (f"{f['infer_ms']:.1f} ({f['infer_min_ms']:.1f})" if "infer_ms" in f else "-")
        print(f"| {name} | {f['step_ms']:.1f} ({f['step_min_ms']:.1f}) "
              f"| {cell('host_ms', '.1f')} | {cell('gpu_busy_ms', '.1f')} "
              f"| {cell('step_per_busy', '.2f')} | {cell('peak_mib', '.0f')} "
              f"| {f['first_step_s']:.1f} | {cell('speedup_vs_stock', '.2f')}x "
              f"| {cell('first_loss_diff_vs_stock', '.1e')} | {infer} "
              f"| {cell('infer_gpu_busy_ms', '.1f')} | {cell('infer_speedup_vs_stock', '.2f')}x |")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
