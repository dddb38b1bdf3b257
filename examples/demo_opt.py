"""Optimizations for demo_lib, as an optimization developer would declare them."""

import math

from turbo_physai import group, replace


def gaussian_2d(shape, sigma=1.0):
    # Separable: exp(-(x^2+y^2)/2s^2) = exp(-x^2/2s^2) * exp(-y^2/2s^2), rows*cols multiplies
    # instead of rows*cols exponentials.
    rows, cols = shape
    cy, cx = (rows - 1) / 2.0, (cols - 1) / 2.0
    gx = [math.exp(-((x - cx) ** 2) / (2 * sigma * sigma)) for x in range(cols)]
    gy = [math.exp(-((y - cy) ** 2) / (2 * sigma * sigma)) for y in range(rows)]
    return [[vy * vx for vx in gx] for vy in gy]


def large_only(shape, sigma=1.0):
    """runtime_condition: the separable form pays off only on larger maps."""
    return shape[0] * shape[1] >= 64


def _peak(self):
    return max(map(max, self.cells))


peak = property(_peak)

GAUSSIAN = group(
    "demo.gaussian",
    replace(
        "demo_lib.heatmap.gaussian_2d",
        "demo_opt.gaussian_2d",
        aliases=("demo_lib.head.gaussian_2d",),
        runtime_condition="demo_opt.large_only",
    ),
)
PEAK = group(
    "demo.peak",
    replace("demo_lib.heatmap.Heatmap.peak", "demo_opt.peak"),
    depends_on=("demo.gaussian",),
)
BROKEN = group("demo.broken", replace("demo_lib.heatmap.not_there", "demo_opt.gaussian_2d"))
