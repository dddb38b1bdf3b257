"""Drop-in front ends of ms_deform_attn for code written against mmcv and transformers.

- :func:`ms_deform_attn_forward` / :func:`ms_deform_attn_backward`: the signatures of
  ``mmcv._ext`` (what ``mmcv.ops.MultiScaleDeformableAttnFunction`` calls). ``im2col_step`` is
  accepted and ignored: the kernel has no batch-divisibility rule.
- :func:`transformers_forward`: the signature of transformers'
  ``MultiScaleDeformableAttention.forward`` (Deformable DETR, RT-DETR and their copies), to be
  installed on that class or used through :class:`MultiScaleDeformableAttention`.
- :func:`transformers_function`: transformers' module-level ``multi_scale_deformable_attention``
  (Mask2Former, OneFormer), shapes given as a tensor or as a list of ``(H, W)``.
- :func:`transformers_function_v2`: ``multi_scale_deformable_attention_v2`` (RT-DETRv2), whose
  points of all levels are concatenated in one axis, uneven counts per level included (padded
  with zero weights). It serves the ``"default"`` method only; :func:`v2_supported` says when a
  call is such (use it as the ``runtime_condition``: other calls go to transformers' own code).
- :func:`ultralytics_function`: Ultralytics' ``multi_scale_deformable_attn_pytorch`` (RT-DETR),
  levels and points folded into one axis as in v2.
- :func:`rfdetr_function`: Roboflow RF-DETR's ``ms_deform_attn_core_pytorch``: value as
  ``(N, M, D, S)``, locations folded (export) or not (eager).
- :func:`libreyolo_ms_deform_attn` / :func:`libreyolo_ms_deform_attn_v2`: LibreYOLO's
  ``ms_deform_attn`` slot signature and its RT-DETRv2-style flat-points adapter
  (``libreyolo.kernels.attention.ms_deform_attn``), returning None, as that slot's providers do,
  for inputs our op does not take so that LibreYOLO's caller keeps its own path.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from turbo_physai import _core, kernels
from turbo_physai.ops._graphs import device_ints
from turbo_physai.ops.ms_deform_attn import _backward_op, check_inputs, ms_deform_attn

__all__ = ["MultiScaleDeformableAttention", "libreyolo_ms_deform_attn",
           "libreyolo_ms_deform_attn_v2", "ms_deform_attn_backward", "ms_deform_attn_forward",
           "rfdetr_function", "transformers_forward", "transformers_function",
           "transformers_function_v2", "ultralytics_function", "v2_supported"]


def _msda(*args):
    # The registry slot picks the implementation per call (our kernels, a hub kernel, the
    # portable reference under tracing/ONNX export). Dynamo cannot see into the slot, so under
    # torch.compile/export the custom op is called directly and stays in the graph.
    if torch.compiler.is_compiling():
        return ms_deform_attn(*args)
    return kernels.ms_deform_attn(*args)


def ms_deform_attn_forward(value, spatial_shapes, level_start_index, sampling_loc, attn_weight,
                           im2col_step=64):
    """``mmcv._ext.ms_deform_attn_forward``: returns ``(N, Lq, M*D)``."""
    del im2col_step  # no batch-divisibility rule to serve
    return _msda(value, spatial_shapes, level_start_index, sampling_loc, attn_weight)


def ms_deform_attn_backward(value, spatial_shapes, level_start_index, sampling_loc, attn_weight,
                            grad_output, grad_value, grad_sampling_loc, grad_attn_weight,
                            im2col_step=64):
    """``mmcv._ext.ms_deform_attn_backward``: fills the three gradient tensors in place.

    They are overwritten. mmcv's CUDA kernel adds into them instead, but every mmcv caller hands
    in fresh zeros (``torch.zeros_like``), for which both give the same result.
    """
    del im2col_step
    spatial_shapes, level_start_index = check_inputs(
        value, spatial_shapes, level_start_index, sampling_loc, attn_weight)
    grads = _backward_op(grad_output, value, spatial_shapes, level_start_index, sampling_loc,
                         attn_weight)
    with torch.no_grad():
        for name, target, grad in zip(
                ("grad_value", "grad_sampling_loc", "grad_attn_weight"),
                (grad_value, grad_sampling_loc, grad_attn_weight), grads, strict=True):
            if not isinstance(target, torch.Tensor) or target.shape != grad.shape:
                shape = tuple(target.shape) if isinstance(target, torch.Tensor) else type(target)
                raise ValueError(f"{name}: expected a tensor of shape {tuple(grad.shape)}, "
                                 f"got {shape}")
            target.copy_(grad)


def transformers_forward(self, value, value_spatial_shapes, value_spatial_shapes_list,
                         level_start_index, sampling_locations, attention_weights, im2col_step):
    """transformers' ``MultiScaleDeformableAttention.forward``, on our op.

    ``value_spatial_shapes_list`` (Python ints of the same shapes) and ``im2col_step`` are not
    needed: the op reads the shapes tensor and has no batch-divisibility rule.
    """
    del self, value_spatial_shapes_list, im2col_step
    return _msda(value, value_spatial_shapes, level_start_index, sampling_locations,
                 attention_weights)


def transformers_function(value, value_spatial_shapes, sampling_locations, attention_weights):
    """transformers' ``multi_scale_deformable_attention`` (Mask2Former, OneFormer), on our op."""
    shapes, starts = _levels(value_spatial_shapes, value.device)
    return _msda(value, shapes, starts, sampling_locations, attention_weights)


def transformers_function_v2(value, value_spatial_shapes, sampling_locations, attention_weights,
                             num_points_list, method="default"):
    """transformers' ``multi_scale_deformable_attention_v2`` for calls :func:`v2_supported`
    accepts: locations ``(N, Lq, M, sum(P_l), 2)`` and weights ``(N, Lq, M, sum(P_l))``, the
    points of each level in turn (see :func:`_even_points`)."""
    del method  # "default" (v2_supported): bilinear sampling, the op's own
    shapes, starts = _levels(value_spatial_shapes, value.device)
    loc, weights = _even_points(sampling_locations, attention_weights, num_points_list)
    return _msda(value, shapes, starts, loc, weights)


def ultralytics_function(value, value_spatial_shapes, sampling_locations, attention_weights):
    """Ultralytics' ``multi_scale_deformable_attn_pytorch`` (its RT-DETR's ``MSDeformAttn``):
    value ``(N, S, M, D)``, shapes a list of ``(H, W)``, locations ``(N, Lq, M, L*P, 2)`` and
    weights ``(N, Lq, M, L*P)``, level-major (it splits the folded axis in runs of P)."""
    shapes, starts = _levels(value_spatial_shapes, value.device)
    return _msda_folded(value, shapes, starts, sampling_locations, attention_weights)


def rfdetr_function(value, value_spatial_shapes, sampling_locations, attention_weights,
                    value_spatial_shapes_hw=None):
    """RF-DETR's ``ms_deform_attn_core_pytorch``: value ``(N, M, D, S)``, weights
    ``(N, Lq, M, L*P)``, locations ``(N, Lq, M, L, P, 2)`` (eager) or ``(N, Lq, M, L*P, 2)``
    (its export mode), level-major. The Python ``(H, W)`` pairs, when given, are used for the
    level metadata (cached, no device work per call), as RF-DETR uses them."""
    shapes = value_spatial_shapes if value_spatial_shapes_hw is None else value_spatial_shapes_hw
    shapes, starts = _levels(shapes, value.device)
    # A view with heads and channels strided by S; the kernels make it dense where they need it.
    value = value.permute(0, 3, 1, 2)
    return _msda_folded(value, shapes, starts, sampling_locations, attention_weights)


def _msda_folded(value, shapes, starts, sampling_locations, attention_weights):
    """The op on weights ``(N, Lq, M, L*P)`` and locations ``(N, Lq, M, L*P, 2)`` or
    ``(N, Lq, M, L, P, 2)``: level-major, the same number of points on every level, so both
    are views of the op's layout."""
    n, lq, m, total = attention_weights.shape
    levels = shapes.shape[0]
    if total % levels:
        raise ValueError(f"attention_weights: {total} points in all cannot be split evenly over "
                         f"{levels} levels")
    points = total // levels
    loc = sampling_locations.reshape(n, lq, m, levels, points, 2)
    weights = attention_weights.reshape(n, lq, m, levels, points)
    return _msda(value, shapes, starts, loc, weights)


def v2_supported(value, value_spatial_shapes, sampling_locations, attention_weights,
                 num_points_list, method="default"):
    """runtime_condition of :func:`transformers_function_v2`: the ``"default"`` (bilinear)
    method, with at least one point on every level (D-FINE style uneven ``[3, 6, 3]`` too).
    ``"discrete"`` sampling stays on transformers' code."""
    del value, value_spatial_shapes, sampling_locations, attention_weights
    return method == "default" and len(num_points_list) > 0 and min(num_points_list) > 0


# Where padded points sample: outside every map (x * W - 0.5 < -1 for any W), so zero padding
# makes them read nothing, whatever the value map holds (Inf or NaN included).
_OUTSIDE = -2.0


def _even_points(sampling_locations, attention_weights, num_points_list):
    """Locations ``(N, Lq, M, sum(P_l), 2)`` and weights ``(N, Lq, M, sum(P_l))``, level after
    level, as the op's ``(N, Lq, M, L, P, 2)`` / ``(N, Lq, M, L, P)``. Uneven counts are padded
    to the largest with weight 0 at a location outside the map: the output and the gradients
    of the real points are those of the uneven sum (the padding adds exact zeros), and the
    padding's gradients are dropped by the slicing autograd undoes."""
    points = [int(p) for p in num_points_list]
    levels, most = len(points), max(points)
    total = attention_weights.shape[-1]
    if sum(points) != total:
        raise ValueError(f"attention_weights: {total} points in all, num_points_list "
                         f"{points} sums to {sum(points)}")
    if min(points) == most:
        return (sampling_locations.unflatten(3, (levels, most)),
                attention_weights.unflatten(3, (levels, most)))
    pad = torch.nn.functional.pad
    locs = sampling_locations.split(points, dim=3)
    weights = attention_weights.split(points, dim=3)
    return (torch.stack([pad(t, (0, 0, 0, most - t.shape[3]), value=_OUTSIDE) for t in locs], 3),
            torch.stack([pad(t, (0, most - t.shape[3])) for t in weights], 3))


def libreyolo_ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights):
    """LibreYOLO's ``ms_deform_attn`` slot: ``(N, Lq, M*D)``, or None where our op does not take
    the input (see :func:`libreyolo_supported`). ``spatial_shapes`` is the slot's int64 tensor or,
    from our family groups, the model's list of ``(H, W)``."""
    if not libreyolo_supported(value, sampling_locations, attention_weights):
        return None
    return _libreyolo_msda(value, spatial_shapes, sampling_locations, attention_weights)


def _libreyolo_msda(value, spatial_shapes, sampling_locations, attention_weights):
    shapes, starts = _levels(spatial_shapes, value.device)
    return _msda(value, shapes, starts, sampling_locations, attention_weights)


def libreyolo_ms_deform_attn_v2(value, spatial_shapes, sampling_locations, attention_weights,
                                num_points_list):
    """LibreYOLO's ``maybe_ms_deform_attn_v2`` adapter: points of all levels concatenated, as
    RT-DETRv2, D-FINE and DEIM carry them, uneven counts per level (D-FINE's and DEIM's
    ``[3, 6, 3]``) included (:func:`_even_points`); None where the counts do not fit."""
    levels = len(num_points_list)
    if not libreyolo_supported(value, sampling_locations, attention_weights, ranks=(4, 5, 4)) \
            or levels == 0 or len(spatial_shapes) != levels or min(num_points_list) < 1 \
            or sum(num_points_list) != attention_weights.shape[-1]:
        return None  # declined before any padding work
    loc, weights = _even_points(sampling_locations, attention_weights, num_points_list)
    return _libreyolo_msda(value, spatial_shapes, loc, weights)  # supported: checked above


_SIXTEEN_BITS = (torch.float16, torch.bfloat16)


def libreyolo_supported(value, sampling_locations, attention_weights, ranks=(4, 6, 5)) -> bool:
    """The inputs LibreYOLO may hand its slot that our op computes: the slot's ranks (``ranks``:
    value, locations, weights; the v2 adapter's points are concatenated, one rank less), one CPU
    or CUDA device (CUDA only where this build has the kernels), and the op's dtype rule
    (locations and weights alike, value the same or 16-bit beside float32 ones; any floats under
    autocast, which the op promotes). Anything else is LibreYOLO's to run."""
    tensors = (value, sampling_locations, attention_weights)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    if tuple(t.dim() for t in tensors) != tuple(ranks):
        return False
    device = value.device
    if device.type not in ("cpu", "cuda") or sampling_locations.device != device \
            or attention_weights.device != device:
        return False
    if device.type == "cuda" and not hasattr(_core, "ms_deform_attn_forward_cuda"):
        return False
    dtypes = (value.dtype, sampling_locations.dtype, attention_weights.dtype)
    if not all(d.is_floating_point for d in dtypes) or (
            device.type == "cuda" and torch.float64 in dtypes):
        return False
    if torch.is_autocast_enabled(device.type):
        return True
    loc = sampling_locations.dtype
    return attention_weights.dtype == loc and (
        value.dtype == loc or (value.dtype in _SIXTEEN_BITS and loc == torch.float32))


#: (tuple of (H, W), device) -> (spatial_shapes, level_start_index), oldest evicted first. A model
#: calls with a handful of shape lists (one per feature pyramid); building them on every call
#: costs two small tensors and, on CUDA, a synchronizing copy from pageable host memory.
_LEVELS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
_LEVELS_MAX = 16


def _levels(shapes, device):
    """(spatial_shapes, level_start_index) on ``device`` from the shapes tensor or the Python
    list of (H, W) models hand in (they keep the list for splitting; the op wants tensors)."""
    if isinstance(shapes, torch.Tensor):
        # .to() returns an int64 tensor already on the device as it is (no copy).
        shapes = shapes.to(device=device, dtype=torch.int64)
        return shapes, _level_starts(shapes)
    if torch.compiler.is_compiling():  # traced into the graph: there is nothing to reuse
        return _build_levels(shapes, device)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return _fill_levels(shapes, device)
    key = (tuple(map(tuple, shapes)), device)
    levels = _LEVELS.get(key)
    if levels is None:
        # Outside inference mode: an inference tensor could not be saved for a later backward.
        with torch.inference_mode(False):
            levels = _build_levels(shapes, device)
        # Only keys of Python ints are kept (ints hash and compare by value; a tensor entry
        # would hash by identity, and comparing CUDA ones would synchronize).
        if all(type(x) is int for hw in key[0] for x in hw):
            if len(_LEVELS) >= _LEVELS_MAX:
                # The oldest; None: another thread may have evicted it first.
                _LEVELS.pop(next(iter(_LEVELS)), None)
            _LEVELS[key] = levels
    return levels


def _build_levels(shapes, device):
    shapes = torch.as_tensor([tuple(s) for s in shapes], dtype=torch.int64, device=device)
    return shapes, _level_starts(shapes)


def _fill_levels(shapes, device):
    sizes = [int(x) for hw in shapes for x in hw]
    areas = [h * w for h, w in zip(sizes[::2], sizes[1::2], strict=True)]
    flat = device_ints(sizes + list(itertools.accumulate(areas, initial=0))[:-1], device)
    return flat[:len(sizes)].view(-1, 2), flat[len(sizes):]


def _level_starts(shapes):
    areas = shapes[:, 0] * shapes[:, 1]
    return torch.cat([areas.new_zeros(1), areas.cumsum(0)[:-1]])


class MultiScaleDeformableAttention(nn.Module):
    """A module with transformers' ``MultiScaleDeformableAttention`` interface (no parameters)."""

    forward = transformers_forward
