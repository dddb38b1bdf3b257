"""Wrap factory for ``bevfusion.gaussian``: ``draw_heatmap_gaussian`` on the device, compiled.

The stock function builds the Gaussian on the host with numpy, reads the centre with ``int()``
(a device sync per box when the centre is a CUDA tensor), slices the window with Python
integers and copies the Gaussian to the device. :func:`draw_heatmap_gaussian` below does the
same arithmetic with tensor ops only: the Gaussian is built on the heatmap's device by the
``mmdet3d.gaussian`` replacement (hence ``depends_on``), the window is an index set clipped by
a validity mask, and the update is a scatter-max. No host sync, so torch.compile can capture
it without graph breaks.

Results equal the stock ones: the Gaussian is computed in float64 and cast to float32 like the
stock ``torch.from_numpy(...).to(device, torch.float32)``, the centre is truncated toward zero
like ``int()``, and pixels outside the heatmap are left alone. The factory does not call the
original: it installs this reformulation (same signature) behind a lazy torch.compile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...common.compile import lazy_compile
from ...common.mmdet3d.gaussian import gaussian_2d


def draw_heatmap_gaussian(heatmap, center, radius, k=1):
    """In place: ``heatmap[y+dy, x+dx] = max(heatmap[...], k * g[dy, dx])`` for the Gaussian
    ``g`` of diameter ``2 * radius + 1`` centred on ``center = (x, y)``; returns ``heatmap``."""
    import torch

    device = heatmap.device
    diameter = 2 * radius + 1
    gaussian = gaussian_2d((diameter, diameter), diameter / 6, device, torch.float64)
    values = (gaussian.to(torch.float32) * k).to(heatmap.dtype)

    center = torch.as_tensor(center, device=device)
    if center.is_floating_point():
        center = center.trunc()  # int() semantics of the stock function
    center = center.to(torch.int64)
    steps = torch.arange(-radius, radius + 1, device=device)
    ys = center[1] + steps[:, None]
    xs = center[0] + steps[None, :]
    height, width = heatmap.shape[0], heatmap.shape[1]
    inside = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
    # Outside pixels are redirected to index 0 with the lowest value, so the max leaves it.
    index = torch.where(inside, ys * width + xs, 0).reshape(-1)
    lowest = torch.finfo(heatmap.dtype).min
    values = torch.where(inside, values, lowest).reshape(-1)

    # scatter needs a flat view; a non-contiguous heatmap is updated through a copy.
    target = heatmap if heatmap.is_contiguous() else heatmap.contiguous()
    target.view(-1).scatter_reduce_(0, index, values, reduce="amax", include_self=True)
    if target is not heatmap:
        heatmap.copy_(target)
    return heatmap


def compiled_draw_heatmap_gaussian_wrapper(
    original: Callable[..., Any], options: Mapping[str, Any]
) -> Callable[..., Any]:
    """:func:`draw_heatmap_gaussian` compiled on first use (options: ``common/compile.py``)."""
    del original  # replaced by the reformulation above, which has the same signature
    return lazy_compile(draw_heatmap_gaussian, options)


def compiled_gaussian_radius_wrapper(
    original: Callable[..., Any], options: Mapping[str, Any]
) -> Callable[..., Any]:
    """mmdet3d's own ``gaussian_radius`` (tensor arithmetic) compiled on first use."""
    return lazy_compile(original, options)
