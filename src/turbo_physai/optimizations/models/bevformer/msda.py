"""``bevformer.msda``: BEVFormer's two MSDA autograd Functions on our ``ms_deform_attn``.

BEVFormer calls ``MultiScaleDeformableAttnFunction_fp16/_fp32.apply(value, spatial_shapes,
level_start_index, sampling_locations, attention_weights, im2col_step)``, which run mmcv's
compiled ``_ext`` kernels under ``custom_fwd(cast_inputs=float16 / float32)``: inside a CUDA
autocast region the floating-point inputs are cast to that dtype and the op runs with autocast
off; outside one, as given. The replacements keep that contract and compute with
``turbo_physai.ops.ms_deform_attn`` (differentiable in value, locations and weights; no
batch-divisibility rule, so ``im2col_step`` only has to be a positive integer). They are plain
classes used through ``apply`` (torch.compile traces into them and keeps our custom op in the
graph), with the ``(*args, **kwargs)`` constructor signature of an autograd Function.
"""

from __future__ import annotations

from typing import Any


def _msda(dtype_name: str, value, spatial_shapes, level_start_index, sampling_locations,
          attention_weights, im2col_step) -> Any:
    import torch

    from ....ops import ms_deform_attn

    if isinstance(im2col_step, bool) or not isinstance(im2col_step, int) or im2col_step < 1:
        raise ValueError(f"im2col_step must be a positive integer, got {im2col_step!r}")
    if value.is_cuda and torch.is_autocast_enabled("cuda"):
        dtype = getattr(torch, dtype_name)

        def cast(t):
            return t.to(dtype) if t.is_floating_point() else t

        with torch.autocast("cuda", enabled=False):
            return ms_deform_attn(cast(value), spatial_shapes, level_start_index,
                                  cast(sampling_locations), cast(attention_weights))
    return ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations,
                          attention_weights)


class _UsedThroughApply:
    def __init__(self, *args: Any, **kwargs: Any):
        raise TypeError(f"{type(self).__name__} is used through .apply(...)")


def _function(suffix: str, dtype_name: str) -> type:
    """BEVFormer's ``MultiScaleDeformableAttnFunction_<suffix>`` on our op."""

    def apply(value, value_spatial_shapes, value_level_start_index, sampling_locations,
              attention_weights, im2col_step):
        return _msda(dtype_name, value, value_spatial_shapes, value_level_start_index,
                     sampling_locations, attention_weights, im2col_step)

    name = f"MultiScaleDeformableAttnFunction_{suffix}"
    return type(name, (_UsedThroughApply,), {
        "apply": staticmethod(apply), "__module__": __name__, "__qualname__": name,
        "__doc__": f"MSDA with {dtype_name} inputs inside a CUDA autocast region (BEVFormer's "
                   f"{suffix} Function).",
    })


MultiScaleDeformableAttnFunction_fp16 = _function("fp16", "float16")
MultiScaleDeformableAttnFunction_fp32 = _function("fp32", "float32")
