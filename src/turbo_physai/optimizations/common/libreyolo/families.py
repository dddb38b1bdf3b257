"""The families' own MSDA call sites, on our op in eager runs, ``torch.compile`` and
``torch.export`` alike.

RT-DETR, RT-DETRv2, D-FINE, DEIM, LW-DETR, RF-DETR, Deformable DETR, Grounding DINO, EC and
OV-DEIM keep a grid_sample port of MSDA and consult LibreYOLO's slot first, through three
functions each module imports by name from ``libreyolo.kernels.attention.ms_deform_attn``:
``ms_deform_attn_available`` (False under tracing, ``torch.compile`` and export, so compiled and
exported models always run grid_sample), ``maybe_ms_deform_attn`` / ``maybe_ms_deform_attn_v2``
(walk the slot, None to fall back) and ``spatial_shapes_tensor``. The family groups replace those
module globals with the functions below: the globals are looked up at every call, so that is
enough. (The grid_sample functions themselves are stored on each attention instance in
``__init__``; replacing them would take ``replace_stored``, as the transformers catalog does for
D-FINE and DEIMv2.)

Our op is a ``torch.library`` custom op with a fake implementation and autograd, so these take
part under ``torch.compile`` and ``torch.export`` too. ONNX export stays on LibreYOLO's path
(grid_sample exports as GridSample; our op has no ONNX symbolic), as do the families' own export
switches (RF-DETR's ``_export``, D-FINE's forced manual grid_sample), which they test before
calling these.
"""

from __future__ import annotations

import torch

from turbo_physai.ops.frontends import libreyolo_ms_deform_attn, libreyolo_ms_deform_attn_v2


def ms_deform_attn_available(value: torch.Tensor | None = None) -> bool:
    """Whether to try our op: everywhere but ONNX export, on a CPU or CUDA ``value``."""
    if torch.onnx.is_in_onnx_export():
        return False
    return value is None or value.device.type in ("cpu", "cuda")


def maybe_ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights):
    """Our op, or None (the family's grid_sample port runs) where it does not take the input."""
    if not ms_deform_attn_available(value):
        return None
    return libreyolo_ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights)


def maybe_ms_deform_attn_v2(
    value, spatial_shapes, sampling_locations, attention_weights, num_points_list
):
    """The flat-points variant (RT-DETRv2, D-FINE, DEIM, EC, OV-DEIM), uneven points per level
    (D-FINE's ``[3, 6, 3]``) included."""
    if not ms_deform_attn_available(value):
        return None
    return libreyolo_ms_deform_attn_v2(
        value, spatial_shapes, sampling_locations, attention_weights, num_points_list
    )


def spatial_shapes_tensor(value_spatial_shapes, device):
    """The shapes as the model holds them: our front ends take a list of ``(H, W)`` (cached per
    shape set in eager runs, built in the graph when traced) as well as a tensor. LibreYOLO's
    version caches through ``functools.lru_cache``, which tracing cannot follow."""
    del device
    return value_spatial_shapes
