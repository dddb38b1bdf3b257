"""Modulated deformable convolution (DCNv2) in plain torch ops (group ``mmcv.mdc``).

Same arguments and math as ``mmcv.ops.modulated_deform_conv2d`` (read from mmcv's
``modulated_deform_conv_cuda_kernel.cuh``):

* ``offset`` is ``(N, deform_groups * 2 * kh * kw, Ho, Wo)``; for deform group ``g`` and tap
  ``k = i * kw + j`` channel ``g * 2 * kh * kw + 2 * k`` is the row offset (dy) and the next
  one the column offset (dx). ``mask`` is ``(N, deform_groups * kh * kw, Ho, Wo)``.
* Tap ``(i, j)`` of output ``(ho, wo)`` samples row ``ho * stride_h - pad_h + i * dilation_h
  + dy`` and column likewise, bilinearly, with zeros outside the image; the sample is multiplied
  by the mask, then the taps are contracted with ``weight`` as a grouped convolution.
* Input channel ``c`` belongs to deform group ``c // (C // deform_groups)``.
* Like mmcv, ``input`` is cast to ``offset``'s dtype (its AMP rule), ``weight``, ``bias`` and
  ``mask`` to the input's.

Formulation: one gather per bilinear corner builds the im2col columns ``(N, C, kh * kw, Ho *
Wo)``, then a batched matmul per convolution group. Everything is differentiable torch ops, so
autograd gives the gradients of input, offset, mask, weight and bias; no custom backward.
Memory is that of mmcv's column buffer for the whole batch at once (mmcv works through
``im2col_step`` samples at a time), plus what autograd keeps.

The output keeps the input's memory format: channels_last in, channels_last out.
"""

from __future__ import annotations

from typing import Any

from ....engine.context import CompatibilityResult

#: mmcv releases this replacement is declared valid for, by distribution (1.x ships the ops as
#: ``mmcv-full``, 2.x as ``mmcv``). The math was checked against the 2.x sources (Python front
#: and CUDA im2col kernel); the 1.x range covers the releases the seed's models pin (BEVFusion
#: and BEVFormer: 1.4.0; the seed's example: 1.7.1), whose front has the same arguments. No
#: release was run here: mmcv cannot be installed next to torch 2.13.
VALIDATED = {"mmcv-full": ">=1.4.0,<1.8", "mmcv": ">=2.0.0,<2.3"}


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected an int or a pair of ints, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def modulated_deform_conv2d(
    input,
    offset,
    mask,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    deform_groups=1,
):
    """DCNv2 forward, differentiable in every tensor argument. Shapes as in the module doc."""
    import torch

    if input.dim() != 4:
        raise ValueError(f"Expected 4D tensor as input, got {input.dim()}D tensor instead.")
    input = input.type_as(offset)
    weight, mask = weight.type_as(input), mask.type_as(input)
    n, channels, height, width = input.shape
    c_out, c_per_group, kh, kw = weight.shape
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    ho = (height + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wo = (width + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    taps = kh * kw
    _check_shapes(input, offset, mask, weight, groups, deform_groups, taps, ho, wo, c_per_group)

    dev, dt = input.device, input.dtype
    # Integer sampling grid before the offsets: (taps, Ho, Wo) rows and columns.
    rows = torch.arange(ho, device=dev, dtype=dt) * sh - ph
    cols = torch.arange(wo, device=dev, dtype=dt) * sw - pw
    tap_rows = (torch.arange(kh, device=dev, dtype=dt) * dh).repeat_interleave(kw)
    tap_cols = (torch.arange(kw, device=dev, dtype=dt) * dw).repeat(kh)
    base_y = tap_rows[:, None, None] + rows[None, :, None]
    base_x = tap_cols[:, None, None] + cols[None, None, :]

    off = offset.reshape(n, deform_groups, taps, 2, ho, wo)
    y = base_y + off[:, :, :, 0]  # (N, dg, taps, Ho, Wo)
    x = base_x + off[:, :, :, 1]
    y0, x0 = torch.floor(y), torch.floor(x)
    ly, lx = y - y0, x - x0
    modulation = mask.reshape(n, deform_groups, taps, ho, wo)

    flat = input.reshape(n, deform_groups, channels // deform_groups, height * width)
    columns = None
    for dy, dx, w_corner in (
        (0, 0, (1 - ly) * (1 - lx)),
        (0, 1, (1 - ly) * lx),
        (1, 0, ly * (1 - lx)),
        (1, 1, ly * lx),
    ):
        cy, cx = y0 + dy, x0 + dx
        inside = (cy >= 0) & (cy <= height - 1) & (cx >= 0) & (cx <= width - 1)
        # Corners outside the image read pixel 0 and get weight 0: zero padding without a
        # padded copy of the input.
        index = torch.where(inside, cy * width + cx, 0).to(torch.int64)
        index = index.reshape(n, deform_groups, 1, -1).expand(-1, -1, flat.shape[2], -1)
        scale = (w_corner * inside * modulation).reshape(n, deform_groups, 1, -1)
        term = torch.gather(flat, 3, index) * scale
        columns = term if columns is None else columns + term

    # (N, C, taps, L) -> (N, groups, C/groups * taps, L): rows ordered (channel, tap) like the
    # flattened weight (Cout, C/groups, kh, kw).
    columns = columns.reshape(n, groups, c_per_group * taps, ho * wo)
    kernel = weight.reshape(groups, c_out // groups, c_per_group * taps)
    out = torch.matmul(kernel, columns).reshape(n, c_out, ho, wo)
    if bias is not None:
        out = out + bias.type_as(input).reshape(1, c_out, 1, 1)
    if input.is_contiguous(memory_format=torch.channels_last) and not input.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def _check_shapes(input, offset, mask, weight, groups, deform_groups, taps, ho, wo, cpg):
    n, channels = input.shape[:2]
    if ho <= 0 or wo <= 0:
        raise ValueError(f"convolution input is too small (output would be {ho}x{wo})")
    if channels % deform_groups or channels % groups or weight.shape[0] % groups:
        raise ValueError(
            f"channels {channels} (in) and {weight.shape[0]} (out) must be divisible by "
            f"groups={groups}, and {channels} by deform_groups={deform_groups}"
        )
    if cpg != channels // groups:
        raise ValueError(
            f"weight has {cpg} input channels per group, expected {channels // groups}"
        )
    expected = {
        "offset": (n, deform_groups * 2 * taps, ho, wo),
        "mask": (n, deform_groups * taps, ho, wo),
    }
    for name, tensor in (("offset", offset), ("mask", mask)):
        if tuple(tensor.shape) != expected[name]:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {expected[name]}")


def supports_channels_last(input, offset, mask, weight, *args, **kwargs) -> bool:
    """Runtime condition: route the call to the replacement when all four tensors are
    channels_last (mmcv's kernels read them as NCHW-contiguous), else to mmcv."""
    import torch

    del args, kwargs
    cl = torch.channels_last
    return bool(
        input.is_contiguous(memory_format=cl)
        and offset.is_contiguous(memory_format=cl)
        and mask.is_contiguous(memory_format=cl)
        and weight.is_contiguous(memory_format=cl)
    )


def check_mmcv_version(context) -> CompatibilityResult:
    """compatibility_check of ``mmcv.mdc``: the installed mmcv is one whose math we matched.

    No mmcv distribution at all is not a version problem: the group is then blocked by its
    unresolvable target, which says more (``target.unresolved``).
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    found = {dist: context.package_version(dist) for dist in VALIDATED}
    installed = {dist: v for dist, v in found.items() if v is not None}
    if not installed:
        return CompatibilityResult(True, VALIDATED, found, "mmcv is not installed")
    try:
        ok = any(Version(v) in SpecifierSet(VALIDATED[d]) for d, v in installed.items())
    except InvalidVersion as err:
        return CompatibilityResult(False, VALIDATED, found, f"unreadable mmcv version: {err}")
    reason = "validated mmcv release" if ok else "mmcv release not validated for mmcv.mdc"
    return CompatibilityResult(ok, VALIDATED, found, reason)
