"""Drop-in front ends of ms_deform_attn for code written against mmcv and transformers.

- :func:`ms_deform_attn_forward` / :func:`ms_deform_attn_backward`: the signatures of
  ``mmcv._ext`` (what ``mmcv.ops.MultiScaleDeformableAttnFunction`` calls). ``im2col_step`` is
  accepted and ignored: the kernel has no batch-divisibility rule.
- :func:`transformers_forward`: the signature of transformers'
  ``MultiScaleDeformableAttention.forward`` (Deformable DETR, RT-DETR and their copies), to be
  installed on that class or used through :class:`MultiScaleDeformableAttention`.
"""

from __future__ import annotations

import torch
from torch import nn

from turbo_physai import kernels
from turbo_physai.ops.ms_deform_attn import _backward_op, check_inputs, ms_deform_attn

__all__ = ["MultiScaleDeformableAttention", "ms_deform_attn_backward", "ms_deform_attn_forward",
           "transformers_forward"]


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


class MultiScaleDeformableAttention(nn.Module):
    """A module with transformers' ``MultiScaleDeformableAttention`` interface (no parameters)."""

    forward = transformers_forward
