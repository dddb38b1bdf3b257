"""benchmarks/e2e_libreyolo.py: LibreYOLO's own DETR models, stock vs ``turbo_physai.libreyolo``.

    PYTHONPATH=src python benchmarks/e2e_libreyolo.py [--models rtdetr,lwdetr,deformable_detr]
        [--batch 8] [--reps 10] [--compile MODE [--compile-backend NAME]] [--cuda-graph]
        [--json PATH]
    PYTHONPATH=src python benchmarks/e2e_libreyolo.py --quick     # CPU, tiny: checks it runs

Models from LibreYOLO's own constructors and size tables, random weights, nothing downloaded:
RT-DETR-R50 (``RTDETR_CONFIGS["r50"]``, backbone not pretrained) at 640, LW-DETR-M at 640,
D-FINE-L (3, 6 and 3 points per level) at 640 and Deformable DETR R50 (torchvision ResNet-50
with ``weights=None``) at 800, the families' default input sizes (``INPUT_SIZES``); batch 8,
float32.

"stock" is LibreYOLO as installed, with its best in-tree path: its ``ms_deform_attn`` slot
resolves to its Triton kernel where triton and a GPU are present (inference only: it declines
inputs that need a gradient, so training steps run the grid_sample port) and to nothing on the
CPU; the Hub provider needs the network and the ``kernels`` package, absent here. "ours" is the
same model under ``turbo_physai.apply("turbo_physai.libreyolo")``. Figures: median and minimum
of synchronized wall times of inference (eval, ``no_grad``) and of a training step (train mode:
forward, backward of ``logits.square().mean() + boxes.sum()``, no optimizer step), the provider
each side's slot resolved to, and the largest output difference in eval mode; on CUDA also the
GPU busy time of one call of each (``gpu_profile``) and, with ``--cuda-graph``, what the capture
did (graphs, failed captures, eager calls and why).
``--compile MODE`` adds both sides under ``torch.compile(model, mode=MODE)``: LibreYOLO switches
its slot off while compiling (grid_sample in the graph); our family groups keep our op there.
``--compile-backend aot_eager`` traces without code generation (MODE ignored): with ``--quick``,
a check here that the compiled variant runs. ``--cuda-graph`` adds each model's
``libreyolo.<model>.cuda_graph`` group to "ours" (forward and training step replayed as CUDA
graphs).
"""

from __future__ import annotations

import argparse
import copy
import json
import socket
import sys
from pathlib import Path

import libreyolo
import libreyolo.kernels as registry
import torch
from e2e_deformable_detr import first_call_s, times_ms  # one timing loop for the e2e scripts
from e2e_hosts import ours_config
from gpu_profile import gpu_kernels

import turbo_physai
from turbo_physai.optimizations.common import cuda_graph

CONFIG = "turbo_physai.libreyolo"


def build(name: str, quick: bool) -> tuple[torch.nn.Module, int]:
    """(model, default input size) from LibreYOLO's own tables; --quick: the smallest ones."""
    if name == "rtdetr":
        from libreyolo.models.rtdetr.model import RTDETR_CONFIGS, LibreRTDETR
        from libreyolo.models.rtdetr.nn import RTDETRModel

        size = "r18" if quick else "r50"
        cfg = RTDETR_CONFIGS[size]  # the keyword arguments LibreRTDETR._init_model passes
        model = RTDETRModel(
            num_classes=80,
            backbone_depth=cfg["backbone_depth"],
            backbone_freeze_at=cfg["backbone_freeze_at"],
            backbone_freeze_norm=cfg["backbone_freeze_norm"],
            backbone_pretrained=False,
            hidden_dim=cfg["encoder_hidden_dim"],
            dim_feedforward=cfg["encoder_dim_feedforward"],
            expansion=cfg["encoder_expansion"],
            decoder_hidden_dim=cfg["decoder_hidden_dim"],
            decoder_dim_feedforward=cfg.get("decoder_dim_feedforward", 1024),
            num_decoder_layers=cfg["num_decoder_layers"],
            eval_idx=cfg["eval_idx"],
        )
        return model, 128 if quick else LibreRTDETR.INPUT_SIZES[size]
    if name == "lwdetr":
        from libreyolo.models.lwdetr.model import LibreLWDETR
        from libreyolo.models.lwdetr.nn import LibreLWDETRModel

        size = "t" if quick else "m"
        return LibreLWDETRModel(size, nc=80), 192 if quick else LibreLWDETR.INPUT_SIZES[size]
    if name == "dfine":  # sizes s-x: 3, 6 and 3 points per level (grid_sample until padded)
        from libreyolo.models.dfine.model import LibreDFINE
        from libreyolo.models.dfine.nn import LibreDFINEModel

        size = "s" if quick else "l"
        model = LibreDFINEModel(size, nb_classes=80, eval_spatial_size=None)
        return model, 256 if quick else LibreDFINE.INPUT_SIZES[size]
    if name == "deformable_detr":
        from libreyolo.models.deformable_detr.model import LibreDeformableDETR
        from libreyolo.models.deformable_detr.nn import LibreDeformableDETRModel

        return LibreDeformableDETRModel("r50", nc=91), (
            128 if quick else LibreDeformableDETR.INPUT_SIZES["r50"]
        )
    raise SystemExit(f"unknown model {name!r}: rtdetr, lwdetr, dfine, deformable_detr")


def calls(model, forward, pixels):
    def infer():
        model.eval()
        with torch.no_grad():
            return forward(pixels)

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        out = forward(pixels)
        (out["pred_logits"].float().square().mean() + out["pred_boxes"].float().sum()).backward()

    return infer, train_step


def measure(model, start_state, pixels, device, reps, compile_options):
    # Training steps move BatchNorm statistics: each side starts from the same state, and its
    # eval outputs are taken before it trains. Under torch.compile the first calls compile:
    # their time is reported, not measured.
    model.load_state_dict(start_state)
    forward = torch.compile(model, **compile_options) if compile_options is not None else model
    infer, train_step = calls(model, forward, pixels)
    figures = {"slot": registry.active().get("ms_deform_attn", "unavailable")}
    out, figures["inference_first_call_s"] = first_call_s(infer, device)
    _, figures["train_step_first_call_s"] = first_call_s(train_step, device)
    for key, fn in (("inference", infer), ("train_step", train_step)):
        figures[f"{key}_ms"], figures[f"{key}_min_ms"] = times_ms(fn, device, reps)
        figures[f"{key}_gpu_busy_ms"] = gpu_kernels(fn, device)["busy_ms"]
    graphs = cuda_graph.stats(model)
    if graphs:  # where a capture failed or a call ran eagerly, and why
        figures["cuda_graph"] = {path: {"graphs": len(s["graphs"]), "failed": s["failed"],
                                        "eager": s["eager"]} for path, s in graphs.items()}
    return figures, [out["pred_logits"].float(), out["pred_boxes"].float()]


def max_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def compare(model, start_state, pixels, args, prefix, compile_options, config):
    row = {}
    torch._dynamo.reset()
    row[f"{prefix}stock"], stock_out = measure(
        model, start_state, pixels, args.device, args.reps, compile_options
    )
    torch._dynamo.reset()
    with turbo_physai.applied(config, strict=True):
        row[f"{prefix}ours"], ours_out = measure(
            model, start_state, pixels, args.device, args.reps, compile_options
        )
    row[f"{prefix}max_abs_diff"] = max_diff(ours_out, stock_out)
    for key in ("inference", "train_step"):
        stock_ms, ours_ms = row[f"{prefix}stock"][f"{key}_ms"], row[f"{prefix}ours"][f"{key}_ms"]
        row[f"{prefix}speedup_{key}"] = round(stock_ms / ours_ms, 2)
    return row


def run_model(name, args):
    torch.manual_seed(0)
    model, size = build(name, args.quick)
    model = model.to(args.device)
    gen = torch.Generator().manual_seed(1)
    pixels = torch.randn(args.batch, 3, size, size, generator=gen).to(args.device)
    start_state = copy.deepcopy(model.state_dict())
    graphs = (f"libreyolo.{name}.cuda_graph",) if args.cuda_graph else ()
    config = ours_config(CONFIG, graphs)
    row = {"shape": list(pixels.shape), "config": " + ".join((CONFIG, *graphs))}
    variants = [("", None)]
    if args.compile:
        options = {"backend": args.compile_backend}
        if args.compile_backend == "inductor":
            options["mode"] = args.compile
        variants.append(("compiled_", options))
        row["compile_options"] = options
    for prefix, options in variants:
        try:
            row.update(compare(model, start_state, pixels, args, prefix, options, config))
        except Exception as error:  # recorded: the model's other figures stay usable
            if not prefix:
                raise
            row[f"{prefix}error"] = repr(error)
    return row


def table(results) -> str:
    lines = [
        f"{'model':<16} {'variant':<9} {'stock slot':<12} {'infer stock':>12} {'ours':>9} "
        f"{'x':>6} {'train stock':>12} {'ours':>9} {'x':>6} {'max diff':>9}"
    ]
    for name, row in results.items():
        for prefix in ("", "compiled_"):
            if f"{prefix}error" in row:
                lines.append(f"{name:<16} {prefix.rstrip('_'):<9} failed: {row[f'{prefix}error']}")
            if f"{prefix}stock" not in row:
                continue
            s, o = row[f"{prefix}stock"], row[f"{prefix}ours"]
            lines.append(
                f"{name:<16} {prefix.rstrip('_') or 'eager':<9} {s['slot']:<12} "
                f"{s['inference_ms']:>10.1f}ms {o['inference_ms']:>7.1f}ms "
                f"{row[f'{prefix}speedup_inference']:>6.2f} {s['train_step_ms']:>10.1f}ms "
                f"{o['train_step_ms']:>7.1f}ms {row[f'{prefix}speedup_train_step']:>6.2f} "
                f"{row[f'{prefix}max_abs_diff']:>9.1e}"
            )
    return "\n".join(lines)


def refuse_network() -> None:
    """Nothing may download: a model that tried would fail here rather than fetch weights."""

    def refuse(*args, **kwargs):
        raise RuntimeError("e2e_libreyolo: a network connection was attempted")

    socket.socket.connect = refuse
    socket.create_connection = refuse


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rtdetr,lwdetr,dfine,deformable_detr")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument(
        "--compile",
        metavar="MODE",
        default=None,
        help="also measure both under torch.compile(mode=MODE), e.g. default",
    )
    parser.add_argument("--compile-backend", metavar="NAME", default="inductor")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="ours with each model's libreyolo.<model>.cuda_graph group too")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CPU, batch 1, the smallest sizes at 128-192 px, 2 reps",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="default benchmarks/results/e2e_libreyolo[_quick].json",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.device, args.batch, args.reps = "cpu", 1, 2
    refuse_network()
    results = {name: run_model(name, args) for name in args.models.split(",")}
    out = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "libreyolo": libreyolo.__version__,
        "command": " ".join(sys.argv),
        "batch": args.batch,
        "results": results,
    }
    print(table(results))
    path = args.json or Path(
        f"benchmarks/results/e2e_libreyolo{'_quick' if args.quick else ''}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
