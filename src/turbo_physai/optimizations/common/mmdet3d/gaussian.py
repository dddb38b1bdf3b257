"""``mmdet3d.core.utils.gaussian.gaussian_2d`` computed with torch (group ``mmdet3d.gaussian``).

The stock function builds the map with ``np.ogrid`` in float64 and returns a numpy array; its
only caller in MMDetection3D, ``draw_heatmap_gaussian``, passes the result to
``torch.from_numpy``. A replacement that always returned a tensor (as the seed document's
example does) would break that caller with ``TypeError: expected np.ndarray``. So the return
type follows the call:

* ``gaussian_2d(shape, sigma)``, the stock call: a float64 ``numpy.ndarray``, the same values
  as the stock function (up to the last bit of ``exp``, which numpy and torch compute with
  different libraries). A drop-in, not a speed-up: the gain comes from callers that ask for a
  tensor.
* ``gaussian_2d(shape, sigma, device=..., dtype=...)``: a ``torch.Tensor`` built directly on
  ``device`` in ``dtype`` (float32 when only ``device`` is given), so device-side callers such
  as the ``bevfusion.gaussian`` group skip the host round trip.

In both cases values below ``eps * max`` (``eps`` of the computing dtype) are set to zero,
as in the stock function.
"""

from __future__ import annotations

from typing import Any


def gaussian_2d(shape, sigma=1, device=None, dtype=None) -> Any:
    """Gaussian map of ``shape`` (rows, cols) with standard deviation ``sigma``, centred.

    Returns a float64 ndarray when neither ``device`` nor ``dtype`` is given (the stock
    contract), else a tensor on ``device`` in ``dtype`` (default float32).
    """
    import torch

    as_numpy = device is None and dtype is None
    if as_numpy:
        dtype = torch.float64
    elif dtype is None:
        dtype = torch.float32
    rows, cols = ((size - 1.0) / 2.0 for size in shape)
    # arange(-m, m + 1) has exactly `size` points for integer and half-integer m, as np.ogrid.
    y = torch.arange(-rows, rows + 1, device=device, dtype=dtype).unsqueeze(1)
    x = torch.arange(-cols, cols + 1, device=device, dtype=dtype).unsqueeze(0)
    heatmap = torch.exp(-(x * x + y * y) / (2 * sigma * sigma))
    cutoff = torch.finfo(heatmap.dtype).eps * heatmap.max()
    heatmap = torch.where(heatmap < cutoff, torch.zeros_like(heatmap), heatmap)
    return heatmap.numpy() if as_numpy else heatmap
