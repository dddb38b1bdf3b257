"""What stands between Deformable DETR's training step and CUDA-graph capture (issue 29)?

    python benchmarks/experiments/detr_capture_probe.py [--side 512] [--json PATH]

Stock transformers model (ResNet-50 backbone, random init, batch 2), no turbo_physai. For each
phase of a training step (forward, forward with labels = the DETR loss with Hungarian matching,
backward) it lists the lines that synchronize with the GPU (``torch.cuda.set_sync_debug_mode``
warnings, grouped by source line, with counts); then it tries to capture the forward (train mode,
``torch.cuda.make_graphed_callables``) and the inference forward (``torch.cuda.graph``), and
prints where each capture fails. Prints as it goes (a time limit may cut it short) and writes
the findings as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch


def build(side: int):
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig

    config = DeformableDetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=ResNetConfig(out_features=["stage2", "stage3", "stage4"]),
        backbone=None,
    )
    torch.manual_seed(0)
    model = DeformableDetrForObjectDetection(config).cuda().train()
    images = torch.randn(2, 3, side, side, device="cuda")
    mask = torch.ones(2, side, side, dtype=torch.long, device="cuda")
    labels = [
        {
            "class_labels": torch.randint(0, config.num_labels, (5,), device="cuda"),
            "boxes": torch.rand(5, 4, device="cuda") * 0.4 + 0.3,
        }
        for _ in range(2)
    ]
    return model, images, mask, labels


def syncs(fn) -> list[dict]:
    """The lines that synchronized while ``fn`` ran, most frequent first."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    counts = collections.Counter(
        f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)
    )
    return [{"line": line, "count": n} for line, n in counts.most_common()]


def failure(e: BaseException) -> dict:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "site-packages" in f.filename]
    where = [f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in frames[-4:]]
    return {"error": f"{type(e).__name__}: {str(e)[:400]}", "where": where}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=512)
    parser.add_argument("--json", type=Path, default=Path("detr_capture_probe.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("detr_capture_probe.py needs a GPU")
    import transformers

    model, images, mask, labels = build(args.side)
    found = {"transformers": transformers.__version__, "torch": torch.__version__}

    def report(key, value):
        found[key] = value
        print(key, json.dumps(value, indent=1), flush=True)
        args.json.write_text(json.dumps(found, indent=2) + "\n")

    model(images, pixel_mask=mask, labels=labels).loss.backward()  # warm-up
    torch.cuda.synchronize()
    report("syncs: forward", syncs(lambda: model(images, pixel_mask=mask)))
    holder = {}
    report("syncs: forward with labels",
           syncs(lambda: holder.setdefault("loss", model(images, pixel_mask=mask,
                                                         labels=labels).loss)))
    report("syncs: backward", syncs(lambda: holder["loss"].backward()))

    def heads(x, m):
        out = model(x, pixel_mask=m)
        return out.logits, out.pred_boxes

    start = time.perf_counter()
    try:
        graphed = torch.cuda.make_graphed_callables(heads, (images, mask))
        logits, boxes = graphed(images, mask)
        (logits.sum() + boxes.sum()).backward()
        report("capture: train forward+backward", {"ok": True,
                                                   "seconds": time.perf_counter() - start})
    except Exception as e:
        report("capture: train forward+backward", failure(e))
    model.eval()
    try:
        with torch.no_grad():
            heads(images, mask)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = heads(images, mask)
            graph.replay()
            torch.cuda.synchronize()
            eager = heads(images, mask)
            same = all(torch.equal(a, b) for a, b in zip(static, eager, strict=True))
        report("capture: inference", {"ok": True, "replay_equals_eager": same})
    except Exception as e:
        report("capture: inference", failure(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
