"""Parity checks of benchmarks/e2e_rtdetr.py: what each comparison can and cannot show.

RT-DETR picks its decoder queries with a top-k over encoder scores, before any MSDA call. Any
change in the encoder's numerics (a compiled graph fuses differently) can reorder near-equal
scores, and then query i of one run is another image location than query i of the other: a
per-query difference says nothing. Three checks, each for its own claim:

- :func:`op_errors`: our op against transformers' own MSDA code, both float32, each against a
  float64 run of transformers' code, on the real inputs of the last decoder layer's MSDA call.
  This is where the CUDA kernel is checked (it has no float64 path).
- :func:`float64_model`: whole model in float64, stock against the msda group, eager. On a GPU
  the registry runs the reference (grid_sample) formulation here, because the CUDA kernel takes
  float32/16/bf16 only: this checks the front end's argument mapping, not the kernel; on the
  CPU the C++ kernel runs in float64. The implementation used is reported.
- :func:`compare`: float32 outputs of a variant against stock eager at the benchmark size: how
  many queries picked the same encoder location (their ``enc_topk_bboxes`` agree), the largest
  per-query difference over those, and how many of the final detections (transformers' RT-DETR
  post-processing selection) match a stock detection.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

import turbo_physai as tpa
from turbo_physai import kernels

SLOT = "ms_deform_attn"
#: Absolute tolerance on scores and normalized box coordinates (0.64 pixel at 640x640) for two
#: queries or detections to count as the same.
TOL = 1e-3
KEYS = ("logits", "pred_boxes", "enc_topk_bboxes")


def snapshot(out) -> dict[str, torch.Tensor]:
    """Copies of the compared outputs: a CUDA-graph replay overwrites its output buffers."""
    return {k: getattr(out, k).detach().clone() for k in KEYS}


@contextmanager
def last_msda_call(model):
    """Collects ``(arguments, output)`` of each call of the last decoder layer's MSDA module
    (transformers' signature); the last call's are ``calls[-1]``."""
    attn = model.model.decoder.layers[-1].encoder_attn.attn
    calls = []
    hook = attn.register_forward_hook(lambda module, args, out: calls.append((args, out)))
    try:
        yield calls
    finally:
        hook.remove()


def implementation(value, spatial_shapes, level_start_index, locations, weights) -> str:
    """Name of the registry implementation a call with these tensors runs."""
    args = (value, spatial_shapes, level_start_index, locations, weights)
    impl = kernels.resolve(SLOT, *args)
    device = value.device.type
    return next(i["name"] for i in kernels.implementations(SLOT)
                if i["impl"] is impl and device in i["requires"].get("device", [device]))


def stock_reference(model, pixels) -> tuple[dict[str, torch.Tensor], tuple]:
    """Stock eager outputs at the benchmark size, and the arguments of the last decoder layer's
    MSDA call captured on the way."""
    with last_msda_call(model) as calls, torch.no_grad():
        ref = snapshot(model(pixel_values=pixels))
    return ref, calls[-1][0]


def _max_diff(a, b) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def op_errors(model, msda_args, msda_group: str) -> dict:
    """Float32 error of transformers' MSDA code and of ours (through the group) against
    transformers' code in float64, on one captured call's inputs."""
    attn = model.model.decoder.layers[-1].encoder_attn.attn
    as64 = tuple(a.double() if torch.is_tensor(a) and a.is_floating_point() else a
                 for a in msda_args)
    with torch.no_grad():
        truth = attn(*as64)
        stock = attn(*msda_args)
        with tpa.applied(groups=[msda_group], strict=True):
            ours = attn(*msda_args)
    value, shapes, _, starts, loc, weights, _ = msda_args
    return {"what": "last decoder layer's MSDA call at the benchmark size, float32, error "
                    "against transformers' code in float64 on the same inputs",
            "shape_value": list(value.shape), "shape_locations": list(loc.shape),
            "max_abs_output": float(truth.abs().max()),
            "stock_fp32_max_abs_err": _max_diff(stock, truth),
            "ours_fp32_max_abs_err": _max_diff(ours, truth),
            "ours_implementation": implementation(value, shapes, starts, loc, weights)}


def float64_model(model, pixels, msda_group: str) -> dict:
    """Stock vs ours eager with the model in float64 (converted back to float32 after: the
    round trip is exact)."""
    model.double()
    try:
        px = pixels.double()
        with last_msda_call(model) as calls, torch.no_grad():
            stock = snapshot(model(pixel_values=px))
            with tpa.applied(groups=[msda_group], strict=True):
                ours = snapshot(model(pixel_values=px))
        (value, shapes, _, starts, loc, weights, _), msda_out = calls[-1]
        impl = implementation(value, shapes, starts, loc, weights)
    finally:
        model.float()
    # How much the decoder's MSDA contributes: with the decoder's values small next to the
    # (layer-normed) queries, a difference in it can vanish from the logits and boxes.
    return {"what": "whole model in float64, stock vs msda group, eager",
            "shape": list(pixels.shape), "ours_implementation": impl,
            "msda_output_max_abs": float(msda_out.abs().max()),
            "logits_max_abs": float(stock["logits"].abs().max()),
            "logits_max_abs_diff": _max_diff(ours["logits"], stock["logits"]),
            "pred_boxes_max_abs_diff": _max_diff(ours["pred_boxes"], stock["pred_boxes"]),
            "same_query_selection": _max_diff(ours["enc_topk_bboxes"],
                                              stock["enc_topk_bboxes"]) <= TOL}


def detections(logits, boxes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The selection of transformers' ``RTDetrImageProcessor.post_process_object_detection``
    (``use_focal_loss=True``, threshold 0, boxes left as normalized cxcywh): the top
    ``num_queries`` sigmoid scores over all (query, label) pairs, best first."""
    queries, labels = logits.shape[1:]
    scores, index = torch.topk(logits.sigmoid().flatten(1), queries, dim=-1)
    picked = boxes.gather(1, (index // labels).unsqueeze(-1).expand(-1, -1, boxes.shape[-1]))
    return scores, index % labels, picked


def _matched(ref, got) -> int:
    """Detections of ``got`` with an unused ``ref`` detection of the same label and scores and
    boxes within TOL (greedy, best score first)."""
    (rs, rl, rb), (gs, gl, gb) = ref, got
    close = ((gl[:, None] == rl[None, :]) & ((gs[:, None] - rs[None, :]).abs() <= TOL)
             & ((gb[:, None, :] - rb[None, :, :]).abs().amax(-1) <= TOL)).cpu()
    used = torch.zeros(close.shape[1], dtype=torch.bool)
    count = 0
    for row in close:
        free = (row & ~used).nonzero()
        if len(free):
            used[free[0, 0]] = True
            count += 1
    return count


def compare(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> dict:
    same = (ref["enc_topk_bboxes"] - got["enc_topk_bboxes"]).abs().amax(-1) <= TOL
    batch, queries = same.shape
    row = {"queries": batch * queries, "queries_same_location": int(same.sum())}
    for key in ("logits", "pred_boxes"):
        row[f"{key}_max_abs_diff_same_location"] = (
            _max_diff(got[key][same], ref[key][same]) if same.any() else None)
    ref_det = detections(ref["logits"], ref["pred_boxes"])
    got_det = detections(got["logits"], got["pred_boxes"])
    matched = [_matched([t[b] for t in ref_det], [t[b] for t in got_det]) for b in range(batch)]
    row.update(detections=batch * queries, detections_matched=sum(matched),
               detections_matched_worst_image=min(matched))
    return row
